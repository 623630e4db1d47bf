package crash

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// outage is how long TestBackendOutage keeps PostgreSQL down.
const outage = 30 * time.Second

// maxRunsPerObject and maxLateRunsPerObject bound the up/destroy attempts per object during the
// outage, and in its second half. The retry backoff per object (watcher: 1 s doubling, capped
// at 15 s for an unavailable backend) gives attempts about 0, 1, 3, 7, 15, 30 s after the
// first failure: 5 or 6 in 30 s, 2 in the second 15 s. The bounds leave one run of slack
// for a spec change during the outage. Attempts that do not thin out mean something bypasses
// the backoff (e.g. the operator's own status writes); over a longer outage that is
// hundreds.
const (
	maxRunsPerObject     = 7
	maxLateRunsPerObject = 3
)

// maxConverge bounds the time from PostgreSQL's return to every object converged: the longest
// backoff (15 s) plus the ups and the destroy of three objects, with room for a loaded machine.
const maxConverge = 90 * time.Second

// TestBackendOutage stops the PostgreSQL backend for 30 s while objects change: a spec change,
// a new object and a delete. While it is down every affected object reports Ready False with a
// message naming the backend (and not its password), the operator backs off instead of
// retrying in a loop, and the deleted object is kept (its finalizer waits for the destroy).
// Once PostgreSQL is back everything converges and the state holds every resource.
//
// It needs PostgreSQL (PULUMI_TEST_POSTGRES_URL says it is set up; the test starts a private
// server with hack/postgres-up.sh, because stopping the shared one would break the tests of
// other packages running at the same time).
func TestBackendOutage(t *testing.T) {
	requirePlugin(t)
	password := "outage-" + randomHex(6)
	pg := startPostgres(t, password)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase, cluster = "outage-passphrase", "outage"
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: c.Kubeconfig, backendURL: pg.url, stateDir: t.TempDir(),
		cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
	pgDown := false
	t.Cleanup(func() {
		if pgDown {
			pg.up(t)
		}
		deleteAllAndWait(t, c, ns, 3*time.Minute)
	})

	live := map[string]spec{
		"o0": {replicas: 1, data: map[string]string{"hostports": "a,8080\n"}},
		"o1": {replicas: 2, data: map[string]string{"hostports": "b,8080\n"}},
		"o2": {replicas: 1, data: map[string]string{"hostports": "c,8080\n"}},
	}
	for name, s := range live {
		if err := createCR(ctx, c, ns, name, s, nil); err != nil {
			t.Fatal(err)
		}
	}
	op.start()
	waitConverged(t, c, ns, live, nil, 3*time.Minute)

	// The outage: PostgreSQL stops; one object changes, one is created, one is deleted.
	mark := op.logs.Len()
	pg.down(t)
	pgDown = true
	downAt := time.Now()
	live["o0"] = spec{replicas: 3, data: map[string]string{"hostports": "a,8080\nd,8080\n"}}
	live["o3"] = spec{replicas: 1, data: map[string]string{"hostports": "e,8080\n"}}
	delete(live, "o2")
	if err := patchCR(ctx, c, ns, "o0", live["o0"]); err != nil {
		t.Fatal(err)
	}
	if err := createCR(ctx, c, ns, "o3", live["o3"], nil); err != nil {
		t.Fatal(err)
	}
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	if err := cr.Delete(ctx, "o2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// What the objects say while the backend is down: the first Ready False of each.
	backendHost := "127.0.0.1:" + pg.port
	seen := map[string]string{}
	for time.Since(downAt) < outage {
		for _, name := range []string{"o0", "o2", "o3"} {
			if _, ok := seen[name]; ok {
				continue
			}
			u, err := cr.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s during the outage: %v", name, err)
			}
			o, err := api.FromUnstructured(u)
			if err != nil {
				t.Fatal(err)
			}
			for _, cd := range o.Status.Conditions {
				if cd.Type == "Ready" && cd.Status == metav1.ConditionFalse && cd.ObservedGeneration == o.Generation {
					seen[name] = cd.Reason + ": " + cd.Message
				}
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	outageLog := op.logs.since(mark)
	u, err := cr.Get(ctx, "o2", metav1.GetOptions{})
	if err != nil || u.GetDeletionTimestamp() == nil {
		t.Errorf("o2 after %s of outage: %v (deleting: %v), want it kept until its stack is destroyed", outage, err, u != nil && u.GetDeletionTimestamp() != nil)
	}
	pg.up(t)
	pgDown = false

	for _, name := range []string{"o0", "o2", "o3"} {
		msg, ok := seen[name]
		switch {
		case !ok:
			t.Errorf("%s never reported Ready False during the outage", name)
		case !strings.HasPrefix(msg, api.ReasonBackendUnavailable+": "):
			t.Errorf("%s: Ready False reason is not %s: %q", name, api.ReasonBackendUnavailable, msg)
		case !strings.Contains(msg, backendHost) && !strings.Contains(strings.ToLower(msg), "postgres"):
			t.Errorf("%s: Ready False message names neither PostgreSQL nor %s: %q", name, backendHost, msg)
		}
		if strings.Contains(msg, password) {
			t.Errorf("%s: Ready False message shows the database password: %q", name, msg)
		}
		t.Logf("%s during the outage: Ready False %s", name, msg)
	}
	if strings.Contains(outageLog, password) || strings.Contains(outageLog, url.QueryEscape(password)) {
		t.Errorf("the operator's log shows the database password during the outage")
	}
	runs := countLines(outageLog, "running up") + countLines(outageLog, "running destroy")
	perObject, late := map[string]int{}, map[string]int{}
	for _, name := range []string{"o0", "o1", "o2", "o3"} {
		for _, at := range runTimes(outageLog, ns, name) {
			if at.Before(downAt.Add(outage)) {
				perObject[name]++
				if at.After(downAt.Add(outage / 2)) {
					late[name]++
				}
			}
		}
		if perObject[name] > maxRunsPerObject || late[name] > maxLateRunsPerObject {
			t.Errorf("%s: %d up/destroy runs in %s of outage, %d in its second half; want at most %d and %d (backoff)",
				name, perObject[name], outage, late[name], maxRunsPerObject, maxLateRunsPerObject)
		}
	}
	t.Logf("%d up/destroy runs in %s of outage %v, in its second half %v; %d \"reconcile failed\" lines",
		runs, outage, perObject, late, countLines(outageLog, "reconcile failed"))

	took := waitConverged(t, c, ns, live, []string{"o2"}, 4*time.Minute)
	t.Logf("converged %s after PostgreSQL came back (%s after it went down)", took.Round(time.Second), time.Since(downAt).Round(time.Second))
	if took > maxConverge {
		t.Errorf("converged %s after PostgreSQL came back, want within %s (the backoff of an unavailable backend is capped at 15 s)", took.Round(time.Second), maxConverge)
	}
	b := openBackend(t, pg.url, cluster, passphrase)
	rep := checkState(t, c, b, ns, live)
	t.Logf("stacks checked %d (resources %d, cluster objects %d)", rep.stacks, rep.resources, rep.liveObjects)
}

// runTimes are the times of the "running up"/"running destroy" lines of object ns/name.
func runTimes(log, ns, name string) []time.Time {
	var out []time.Time
	for _, l := range strings.Split(log, "\n") {
		if !strings.Contains(l, `msg="running `) || !strings.Contains(l, " object="+ns+"/"+name+" ") {
			continue
		}
		ts, _, _ := strings.Cut(strings.TrimPrefix(l, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, ts); err == nil {
			out = append(out, at)
		}
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
