// Package realnode runs the operator the way users run it, on a real Kubernetes node
// (hack/realnode-up.sh: containerd, runc, a CNI bridge, kubelet, kube-proxy, CoreDNS): the
// operator's own image (`make image`) as a pod installed by the Helm chart and by kustomize
// (`make deploy`), in namespaces enforcing Pod Security "restricted", and the http-server image
// in the pods it creates, with real probes, Services and DNS.
//
// It runs under `make e2e-real`, which builds the images, starts the node and sets
// PULUMI_OPERATOR_REALNODE_KUBECONFIG. Without that variable every test says SKIP, loudly;
// with PULUMI_OPERATOR_REALNODE_REQUIRED=1 (set by `make e2e-real`) a missing node fails.
//
// Traffic goes only to the node's own Service addresses (10.96.0.0/16, routed onto its bridge
// by hack/realnode-up.sh), and every request loop is bounded in count and time.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

var crs = schema.GroupVersionResource{Group: "groupsp.measutosh.dev", Version: "v1", Resource: "kindcustomhttps"}

// node is a connection to the real node's cluster.
type node struct {
	kubeconfig string
	dir        string // REALNODE_DIR: where hostPath volumes may live
	kube       kubernetes.Interface
	dyn        dynamic.Interface
}

// connect returns the real node of PULUMI_OPERATOR_REALNODE_KUBECONFIG, or skips (fails under
// PULUMI_OPERATOR_REALNODE_REQUIRED=1).
func connect(t testing.TB) *node {
	t.Helper()
	kc := os.Getenv("PULUMI_OPERATOR_REALNODE_KUBECONFIG")
	if kc == "" {
		if os.Getenv("PULUMI_OPERATOR_REALNODE_REQUIRED") == "1" {
			t.Fatal("FAIL: PULUMI_OPERATOR_REALNODE_KUBECONFIG is not set")
		}
		t.Skip("SKIP: needs a real node (containers, not kwok's fake pods): run `make e2e-real`")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", kc, err)
	}
	dir := os.Getenv("PULUMI_OPERATOR_REALNODE_DIR")
	if dir == "" {
		dir = filepath.Join(testenv.RepoRoot(), ".local", "realnode")
	}
	return &node{kubeconfig: kc, dir: dir, kube: kubernetes.NewForConfigOrDie(rc), dyn: dynamic.NewForConfigOrDie(rc)}
}

// within polls cond every interval until it holds or timeout passes, then fails naming what.
func within(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, cond)
	if err != nil {
		t.Fatalf("%s: not within %s: %v", what, timeout, err)
	}
}

// restrictedNamespace creates namespace name enforcing Pod Security "restricted", deleted (and
// waited for) when the test ends unless keep.
func (n *node) restrictedNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := n.kube.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() { n.deleteNamespace(t, name) })
}

func (n *node) deleteNamespace(t testing.TB, name string) {
	ctx := context.Background()
	_ = n.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := n.kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// stateVolume makes a PersistentVolume on the node's disk (hostPath under REALNODE_DIR, owned
// by the operator's user 65532: hostPath volumes ignore fsGroup) bound to claim ns/claim, which
// it creates too unless createClaim is false (the manifests bring their own). The real node has
// no volume provisioner. It returns the directory on the host.
func (n *node) stateVolume(t testing.TB, ns, claim string, createClaim bool) string {
	t.Helper()
	ctx := context.Background()
	name := "e2e-" + ns + "-" + claim
	dir := filepath.Join(n.dir, "volumes", name)
	_ = os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	hostPathType := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: claim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostPathType}},
		},
	}
	if _, err := n.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create volume %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = n.kube.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = os.RemoveAll(dir)
	})
	if createClaim {
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claim, Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				VolumeName:  name,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if _, err := n.kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create claim %s/%s: %v", ns, claim, err)
		}
	}
	return dir
}

// operatorPod waits until the operator's Deployment in ns (label selector sel) has exactly one
// pod, Ready, other than not (a pod name, or ""), and returns its name.
func (n *node) operatorPod(t testing.TB, ns, sel, not string, timeout time.Duration) string {
	t.Helper()
	var name string
	within(t, timeout, "operator pod Ready in "+ns, func(ctx context.Context) (bool, error) {
		pods, err := n.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Name != not && p.DeletionTimestamp == nil && podReady(&p) {
				name = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	return name
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dumpOperator logs the operator pods' status and logs and the namespace's events (on failure), as
// one message, so that the error before it stays among a failure summary's last messages
// (hack/failures.sh).
func (n *node) dumpOperator(t testing.TB, ns, sel string) {
	ctx := context.Background()
	pods, err := n.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		t.Logf("list operator pods: %v", err)
		return
	}
	var b strings.Builder
	for _, p := range pods.Items {
		st, _ := yaml.Marshal(p.Status)
		fmt.Fprintf(&b, "operator pod %s status:\n%s\n", p.Name, st)
		logs, err := n.kube.CoreV1().Pods(ns).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr(int64(200))}).DoRaw(ctx)
		fmt.Fprintf(&b, "operator pod %s log (last 200 lines, err %v):\n%s\n", p.Name, err, logs)
	}
	events, _ := n.kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	for _, e := range events.Items {
		fmt.Fprintf(&b, "event %s/%s: %s %s (%dx, last %s)\n", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message, e.Count, e.LastTimestamp.Format("15:04:05"))
	}
	t.Logf("operator dump (namespace %s):\n%s", ns, b.String())
}

func ptr[T any](v T) *T { return &v }

// sample is the original operator's sample (config/samples), renamed to name in namespace ns
// with configMapData hostports.
func sample(t testing.TB, ns, name, hostports string) *unstructured.Unstructured {
	t.Helper()
	u, _ := testenv.Sample(t, ns)
	u.SetName(name)
	if err := unstructured.SetNestedField(u.Object, hostports, "spec", "configMapData", "hostports"); err != nil {
		t.Fatal(err)
	}
	return u
}

// condition returns the status, reason and message of condition typ of cr.
func condition(cr *unstructured.Unstructured, typ string) (status, reason, msg string) {
	conds, _, _ := unstructured.NestedSlice(cr.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == typ {
			s, _ := m["status"].(string)
			r, _ := m["reason"].(string)
			g, _ := m["message"].(string)
			return s, r, g
		}
	}
	return "", "", ""
}

// waitReady waits until KindCustomHttp ns/name is Ready=True for its current generation.
func (n *node) waitReady(t testing.TB, ns, name string, timeout time.Duration) *unstructured.Unstructured {
	t.Helper()
	var cr *unstructured.Unstructured
	within(t, timeout, "KindCustomHttp "+ns+"/"+name+" Ready", func(ctx context.Context) (bool, error) {
		var err error
		cr, err = n.dyn.Resource(crs).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		observed, _, _ := unstructured.NestedInt64(cr.Object, "status", "observedGeneration")
		s, _, _ := condition(cr, "Ready")
		return s == "True" && observed == cr.GetGeneration(), nil
	})
	return cr
}

// available waits until Deployment ns/name has every replica of its current template updated,
// Ready and no old pod left, and returns its pods' names.
func (n *node) available(t testing.TB, ns, name string, replicas int32, timeout time.Duration) []string {
	t.Helper()
	var names []string
	within(t, timeout, "Deployment "+ns+"/"+name+" rolled out and Available", func(ctx context.Context) (bool, error) {
		d, err := n.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		if d.Generation != s.ObservedGeneration || s.UpdatedReplicas != replicas || s.AvailableReplicas != replicas || s.Replicas != replicas {
			return false, nil
		}
		sel := metav1.FormatLabelSelector(d.Spec.Selector)
		pods, err := n.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		names = names[:0]
		for _, p := range pods.Items {
			if !podReady(&p) || p.DeletionTimestamp != nil {
				return false, nil // an old pod still terminating
			}
			names = append(names, p.Name)
		}
		return int32(len(names)) == replicas, nil
	})
	return names
}

// httpClient sends each request on a new connection (kube-proxy picks an endpoint per
// connection), bounded by a 3 s timeout.
var httpClient = &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get GETs url once: status code and body, or an error.
func get(url string) (int, string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// serviceURL is http://<ClusterIP>:<port> of Service ns/name: the node routes the Service range
// from the host through kube-proxy's rules, as it does from pods.
func (n *node) serviceURL(t testing.TB, ns, name string) string {
	t.Helper()
	svc, err := n.kube.CoreV1().Services(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Service %s/%s: %v", ns, name, err)
	}
	if !strings.HasPrefix(svc.Spec.ClusterIP, "10.96.") || len(svc.Spec.Ports) == 0 {
		t.Fatalf("Service %s/%s has ClusterIP %q ports %v: want one in the node's 10.96.0.0/16", ns, name, svc.Spec.ClusterIP, svc.Spec.Ports)
	}
	return fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
}

// expectBody GETs url until it answers 200 with body want (at most 60 tries, 1 s apart: a
// ConfigMap change reaches a mounted volume within the kubelet's sync period).
func expectBody(t *testing.T, url, want string) {
	t.Helper()
	var code int
	var body string
	var err error
	for i := 0; i < 60; i++ {
		code, body, err = get(url)
		if err == nil && code == http.StatusOK && body == want {
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("GET %s = %d %q (%v), want 200 %q", url, code, body, err, want)
}

// pingSuccesses reads http_server_peer_pings_total{peer=peer,result="success"} from the
// /metrics page behind url (one pod's, through the Service).
var pingSeries = regexp.MustCompile(`(?m)^http_server_peer_pings_total\{peer="([^"]+)",result="success"\} (\d+)`)

func pingSuccesses(url, peer string) (int, error) {
	code, body, err := get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("GET %s/metrics: %d", url, code)
	}
	for _, m := range pingSeries.FindAllStringSubmatch(body, -1) {
		if m[1] == peer {
			var n int
			_, _ = fmt.Sscan(m[2], &n)
			return n, nil
		}
	}
	return 0, nil
}

// requestLoop GETs url/ping every 50 ms from start until stop is called (at most 4000
// requests and 4 minutes), counting answers that are not 200.
type requestLoop struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	firstErrors  []string
	done         chan struct{}
	stopOnce     sync.Once
	stopped      chan struct{}
}

func startLoop(url string) *requestLoop {
	l := &requestLoop{done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(l.stopped)
		deadline := time.Now().Add(4 * time.Minute)
		for i := 0; i < 4000 && time.Now().Before(deadline); i++ {
			select {
			case <-l.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			code, _, err := get(url + "/ping")
			l.sent.Add(1)
			if err != nil || code != http.StatusOK {
				l.failed.Add(1)
				l.mu.Lock()
				if len(l.firstErrors) < 5 {
					l.firstErrors = append(l.firstErrors, fmt.Sprintf("%s: %d %v", time.Now().Format(time.StampMilli), code, err))
				}
				l.mu.Unlock()
			}
		}
	}()
	return l
}

func (l *requestLoop) stop() (sent, failed int64, errs []string) {
	l.stopOnce.Do(func() { close(l.done) })
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent.Load(), l.failed.Load(), l.firstErrors
}

// catchUp catches an up in the middle: it makes a change (change(attempt)), then looks every 20
// ms for the stack lock the up takes on the state volume at stateDir, and calls hold as soon as
// there is one; hold returns whether it caught the up (false when the up ended before it could
// act), and catchUp tries again with another change, 5 times at most. An up is short on the
// real node (it does not wait for the rollout), so a slower look misses it.
func (n *node) catchUp(t *testing.T, stateDir string, change func(attempt int), hold func() bool) bool {
	t.Helper()
	for attempt := 1; attempt <= 5; attempt++ {
		change(attempt)
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if _, locks := stackFiles(t, stateDir); len(locks) > 0 {
				if hold() {
					return true
				}
				break
			}
		}
		// Missed: let this up end before the next change.
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, locks := stackFiles(t, stateDir); len(locks) == 0 {
				break
			}
		}
	}
	return false
}

// stackFiles lists the checkpoints (.pulumi/stacks/**/*.json) and locks
// (.pulumi/locks/**/*.json) of the file backend on the operator's state volume at dir.
func stackFiles(t *testing.T, dir string) (stacks, locks []string) {
	t.Helper()
	root := filepath.Join(dir, "backend", ".pulumi")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || filepath.Ext(p) != ".json" {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case strings.HasPrefix(rel, "stacks"+string(filepath.Separator)):
			stacks = append(stacks, rel)
		case strings.HasPrefix(rel, "locks"+string(filepath.Separator)):
			locks = append(locks, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the backend on the state volume %s: %v", dir, err)
	}
	return stacks, locks
}

// objectsOf lists the names of the Deployments, Services and ConfigMaps in ns that belong to
// a KindCustomHttp (kube-root-ca.crt left out).
func (n *node) objectsOf(t *testing.T, ns string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	ds, err := n.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds.Items {
		out = append(out, "deployment/"+d.Name)
	}
	ss, err := n.kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss.Items {
		out = append(out, "service/"+s.Name)
	}
	cms, err := n.kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		if c.Name != "kube-root-ca.crt" {
			out = append(out, "configmap/"+c.Name)
		}
	}
	return out
}

// run runs a command from the repository root, failing the test with its output.
func run(t testing.TB, env []string, name string, args ...string) string {
	t.Helper()
	out, err := execOutEnv(env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func patchData(t *testing.T, n *node, ns, name, hostports string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"configMapData":{"hostports":%q}}}`, hostports)
	if _, err := n.dyn.Resource(crs).Namespace(ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("patch %s/%s: %v", ns, name, err)
	}
}

// execOut runs a command from the repository root and returns its combined output.
func execOut(name string, args ...string) (string, error) { return execOutEnv(nil, name, args...) }

// execOutEnv is execOut with env added to the environment.
func execOutEnv(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// checkRestricted checks that pod ns/name runs as the image's user 65532 with a read-only root
// file system, and that its namespace enforces Pod Security "restricted" (the API server
// admitted it, so it meets that profile).
func (n *node) checkRestricted(t testing.TB, ns, name string) {
	t.Helper()
	ctx := context.Background()
	nsObj, err := n.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces Pod Security %q, want restricted", ns, got)
	}
	p, err := n.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	psc := p.Spec.SecurityContext
	for _, c := range p.Spec.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Fatalf("container %s of %s/%s has no securityContext", c.Name, ns, name)
		}
		uid := sc.RunAsUser
		if uid == nil && psc != nil {
			uid = psc.RunAsUser
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || uid == nil || *uid != 65532 {
			t.Fatalf("container %s of %s/%s: securityContext %+v (pod %+v), want read-only root and user 65532", c.Name, ns, name, sc, psc)
		}
	}
}
