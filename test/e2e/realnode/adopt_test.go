package realnode

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// handoverDrain is the chart's handoverDrain in TestAdoptOriginal: over the 5 s TTL of the
// node's CoreDNS records (its cache holds none longer; the test's resolver caches nothing).
const handoverDrain = 15 * time.Second

// TestAdoptOriginal switches a namespace from the original operator to this one, as its users
// would: objects made exactly as the original made them (Deployment with the hard-coded
// selector, 2 pods of the http-server image, headless Service, ConfigMap) serve /ping through
// the Service's name; the chart is installed and the original sample is applied with the
// adoption annotation. A bounded request loop resolves the headless name through the node's
// CoreDNS before every request and GETs /ping on the address it got, from before the
// KindCustomHttp exists until after the original pods are gone: 0 failed requests. Pods are
// counted before and after: 2 original, then the program's 2 and none of the original.
func TestAdoptOriginal(t *testing.T) {
	n := connect(t)
	ctx := context.Background()
	installChart(t, n, "--set", "handoverDrain="+handoverDrain.String())
	// Not "restricted": the original's pods set no security context.
	ns := "original-e2e"
	if _, err := n.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.deleteNamespace(t, ns) })
	name := "kindcustomhttp-sample"
	testenv.CreateOriginal(t, n.kube, ns, name, 2, 80, map[string]string{"hostports": "localhost,8080\n"}, api.DefaultImage)
	before := n.readyPodsOf(t, ns, "app=measutosh-http-server", 2)
	t.Logf("original pods Ready: %v", before)

	loop := startHeadlessLoop(t, n, ns, name, 8080)
	time.Sleep(2 * time.Second) // requests before the takeover, too
	smp := sample(t, ns, name, "localhost,8080\n")
	smp.SetAnnotations(map[string]string{api.AdoptOriginalAnnotation: "true"})
	t0 := time.Now()
	if _, err := n.dyn.Resource(crs).Namespace(ns).Create(ctx, smp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the sample: %v", err)
	}
	n.waitReady(t, ns, name, reconcile)
	ready := time.Since(t0)
	within(t, 2*time.Minute+handoverDrain, "the original pods gone", func(ctx context.Context) (bool, error) {
		for _, p := range before {
			if _, err := n.kube.CoreV1().Pods(ns).Get(ctx, p, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
	gone := time.Since(t0)
	time.Sleep(2 * time.Second) // requests after the handover, too
	sent, failed, byPod, errs := loop.stop()
	after := n.available(t, ns, name, 2, time.Minute)
	if slices.ContainsFunc(after, func(p string) bool { return slices.Contains(before, p) }) {
		t.Fatalf("pods after the takeover %v include original pods %v", after, before)
	}
	svc, err := n.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("Service after the takeover: %v (clusterIP %q): want it headless still", err, svc.Spec.ClusterIP)
	}
	t.Logf("takeover: Ready after %s, original pods gone after %s; pods %v -> %v; %d requests through the headless name, %d failed; answers by pod: %v",
		ready.Round(100*time.Millisecond), gone.Round(100*time.Millisecond), before, after, sent, failed, byPod)
	if sent < 100 || failed != 0 {
		t.Fatalf("requests during the takeover: %d sent, %d failed (first: %v): want many, 0 failed", sent, failed, errs)
	}
	var fromOld, fromNew bool
	for p := range byPod {
		fromOld = fromOld || slices.Contains(before, p)
		fromNew = fromNew || slices.Contains(after, p)
	}
	if !fromOld || !fromNew {
		t.Fatalf("answers by pod %v: want both original %v and new %v pods to have answered", byPod, before, after)
	}
}

// readyPodsOf waits until namespace ns has n Ready pods matching sel and returns their names.
func (n *node) readyPodsOf(t *testing.T, ns, sel string, want int) []string {
	t.Helper()
	var names []string
	within(t, 2*time.Minute, fmt.Sprintf("%d Ready pods %s in %s", want, sel, ns), func(ctx context.Context) (bool, error) {
		l, err := n.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, err
		}
		names = names[:0]
		for i := range l.Items {
			if podReady(&l.Items[i]) && l.Items[i].DeletionTimestamp == nil {
				names = append(names, l.Items[i].Name)
			}
		}
		return len(names) == want, nil
	})
	return names
}

// headlessLoop resolves a headless Service's name through the node's CoreDNS (kube-dns,
// 10.96.0.10) before every request, with no cache of its own, and GETs /ping on one of the
// addresses it got, every 50 ms (at most 4000 requests and 4 minutes), counting failures and
// which pod answered ("pong from <hostname>").
type headlessLoop struct {
	sent, failed atomic.Int64
	mu           sync.Mutex
	byPod        map[string]int
	firstErrors  []string
	done         chan struct{}
	stopped      chan struct{}
}

func startHeadlessLoop(t *testing.T, n *node, ns, name string, port int) *headlessLoop {
	t.Helper()
	dns, err := n.kube.CoreV1().Services("kube-system").Get(context.Background(), "kube-dns", metav1.GetOptions{})
	if err != nil || !strings.HasPrefix(dns.Spec.ClusterIP, "10.96.") {
		t.Fatalf("kube-dns Service: %v: want one in the node's 10.96.0.0/16", err)
	}
	server := net.JoinHostPort(dns.Spec.ClusterIP, "53")
	resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
	host := fmt.Sprintf("%s.%s.svc.cluster.local", name, ns)
	l := &headlessLoop{byPod: map[string]int{}, done: make(chan struct{}), stopped: make(chan struct{})}
	fail := func(what string) {
		l.failed.Add(1)
		l.mu.Lock()
		if len(l.firstErrors) < 5 {
			l.firstErrors = append(l.firstErrors, time.Now().Format(time.StampMilli)+": "+what)
		}
		l.mu.Unlock()
	}
	go func() {
		defer close(l.stopped)
		deadline := time.Now().Add(4 * time.Minute)
		for i := 0; i < 4000 && time.Now().Before(deadline); i++ {
			select {
			case <-l.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			l.sent.Add(1)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			addrs, err := resolver.LookupHost(ctx, host)
			cancel()
			if err != nil || len(addrs) == 0 {
				fail(fmt.Sprintf("resolve %s: %v %v", host, addrs, err))
				continue
			}
			ip := addrs[rand.IntN(len(addrs))]
			if !strings.HasPrefix(ip, "10.88.0.") {
				fail(fmt.Sprintf("resolve %s: %s is not a pod address of the node", host, ip))
				continue
			}
			code, body, err := get(fmt.Sprintf("http://%s/ping", net.JoinHostPort(ip, fmt.Sprint(port))))
			if err != nil || code != 200 {
				fail(fmt.Sprintf("GET %s/ping: %d %v", ip, code, err))
				continue
			}
			l.mu.Lock()
			l.byPod[strings.TrimSpace(strings.TrimPrefix(body, "pong from "))]++
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *headlessLoop) stop() (sent, failed int64, byPod map[string]int, errs []string) {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	<-l.stopped
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent.Load(), l.failed.Load(), l.byPod, l.firstErrors
}
