package realnode

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// BenchmarkFirstGET measures, on the real node, a new KindCustomHttp (replicaCount 1) from its
// creation to the first successful GET /ping through its Service (`make bench`, figure "first
// GET"), against a baseline run side by side: the same Deployment, Service and ConfigMap (copied
// from what the operator made for the warm-up object) created directly through the API, to the
// same first GET. The difference is what the operator adds (its reconcile and `pulumi up`) on
// top of what the node needs anyway (scheduling, a container start, the readiness probe,
// kube-proxy's rules). Operator and baseline samples alternate, so load from elsewhere hits
// both. PULUMI_OPERATOR_REALNODE_SAMPLES sets the samples of each (default 5; one more warm-up).
// Reported: the medians in seconds and their ratio.
func BenchmarkFirstGET(b *testing.B) {
	n := connect(b)
	installChart(b, n)
	samples := 5
	if s := os.Getenv("PULUMI_OPERATOR_REALNODE_SAMPLES"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("PULUMI_OPERATOR_REALNODE_SAMPLES=%q: want a positive number", s)
		}
		samples = v
	}
	ns := "bench-first-get"
	n.restrictedNamespace(b, ns)
	ctx := context.Background()

	var tmpl *template
	var op, raw []float64
	for i := 0; i <= samples; i++ {
		runOp := func() error {
			name := fmt.Sprintf("op-%d", i)
			cr := sample(b, ns, name, "localhost,8080\n")
			cr.Object["spec"].(map[string]any)["replicaCount"] = int64(1)
			t0 := time.Now()
			if _, err := n.dyn.Resource(crs).Namespace(ns).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
				return err
			}
			secs, err := n.firstGET(ctx, ns, name, t0)
			if err != nil {
				return err
			}
			if tmpl == nil {
				if tmpl, err = n.copyObjects(ctx, ns, name); err != nil {
					return err
				}
			}
			if i > 0 {
				op = append(op, secs)
			}
			b.Logf("operator %s: first GET after %.2f s", name, secs)
			return n.dyn.Resource(crs).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		runRaw := func() error {
			if i == 0 {
				return nil // the template comes from the operator's warm-up object
			}
			name := fmt.Sprintf("raw-%d", i)
			t0 := time.Now()
			if err := n.createCopy(ctx, ns, name, tmpl); err != nil {
				return err
			}
			secs, err := n.firstGET(ctx, ns, name, t0)
			if err != nil {
				return err
			}
			raw = append(raw, secs)
			b.Logf("baseline %s: first GET after %.2f s", name, secs)
			return n.deleteCopy(ctx, ns, name)
		}
		first, second := runOp, runRaw
		if i%2 == 1 {
			first, second = runRaw, runOp
		}
		if err := first(); err != nil {
			b.Fatal(err)
		}
		if err := second(); err != nil {
			b.Fatal(err)
		}
	}
	mo, mr := median(op), median(raw)
	b.ReportMetric(mo, "s-operator-median")
	b.ReportMetric(mr, "s-baseline-median")
	b.ReportMetric(mo/mr, "ratio")
	b.Logf("FIRST GET: operator median %.2f s (%s), baseline (direct create) median %.2f s (%s), ratio %.2fx (%d samples each)",
		mo, secs(op), mr, secs(raw), mo/mr, samples)
}

// secs formats samples as "1.23, 4.56".
func secs(xs []float64) string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(out, ", ")
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// firstGET waits for Service ns/name, then GETs /ping through it every 100 ms (at most 3000
// requests, 5 minutes) until one answers 200, and returns the seconds since t0.
func (n *node) firstGET(ctx context.Context, ns, name string, t0 time.Time) (float64, error) {
	var url string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		svc, err := n.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && svc.Spec.ClusterIP == "") {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		url = fmt.Sprintf("http://%s:%d/ping", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("Service %s/%s: %w", ns, name, err)
	}
	for i := 0; i < 3000 && time.Since(t0) < 5*time.Minute; i++ {
		if code, _, err := get(url); err == nil && code == 200 {
			return time.Since(t0).Seconds(), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return 0, fmt.Errorf("no successful GET %s within 5 minutes", url)
}

// template is the operator's objects of one KindCustomHttp, for the baseline.
type template struct {
	dep *appsv1.Deployment
	svc *corev1.Service
	cm  *corev1.ConfigMap
}

func (n *node) copyObjects(ctx context.Context, ns, name string) (*template, error) {
	dep, err := n.kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	svc, err := n.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cm, err := n.kube.CoreV1().ConfigMaps(ns).Get(ctx, name+"-configmap", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return &template{dep: dep, svc: svc, cm: cm}, nil
}

// createCopy creates the template's objects under name, with labels of their own so that the
// Service selects only its own pods.
func (n *node) createCopy(ctx context.Context, ns, name string, t *template) error {
	sel := map[string]string{"bench-baseline": name}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name + "-configmap", Namespace: ns}, Data: t.cm.Data}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: *t.dep.Spec.DeepCopy()}
	dep.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	dep.Spec.Template.Labels = sel
	for i := range dep.Spec.Template.Spec.Volumes {
		if v := dep.Spec.Template.Spec.Volumes[i].ConfigMap; v != nil {
			v.Name = cm.Name
		}
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.ServiceSpec{
		Type: t.svc.Spec.Type, Selector: sel, Ports: t.svc.Spec.Ports}}
	if _, err := n.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := n.kube.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err := n.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

func (n *node) deleteCopy(ctx context.Context, ns, name string) error {
	if err := n.kube.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	fg := metav1.DeletePropagationForeground
	if err := n.kube.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		return err
	}
	return n.kube.CoreV1().ConfigMaps(ns).Delete(ctx, name+"-configmap", metav1.DeleteOptions{})
}
