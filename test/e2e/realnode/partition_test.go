package realnode

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// The partition test's fixed points: the chart's Lease, this test's PostgreSQL (a port below the
// ephemeral range, apart from `make test`'s), the number of objects whose ups run during the
// faults.
const (
	partitionLease   = "pulumi-operator.groupsp.measutosh.dev"
	partitionPGPort  = "25452"
	partitionObjects = 12
	partitionPhrase  = "partition-e2e"
	// nodeIP is the real node's address on its pod bridge (hack/realnode-up.sh): the API server's
	// and, for this test, PostgreSQL's.
	nodeIP = "10.88.0.1"
)

// TestPartition checks the operator's one-writer-per-stack claim the way Jepsen checks a
// database: two replicas installed by the chart, on a PostgreSQL backend whose every write is
// recorded with its writer (a trigger; each replica's connections name it: stack.postgresAppName),
// ups running on a dozen stacks while the leader is
//
//   - cut off from the API server only (its network namespace drops every packet to and from
//     it, no reset; PostgreSQL and its ups' pods stay reachable), then healed;
//   - cut off the same way during a SIGTERM's grace (its pod deleted);
//   - paused: the operator process alone SIGSTOPped (a GC or VM pause; its engine host and
//     plugins run on), resumed once the follower leads.
//
// Each time the follower must take over, and afterwards the checker reads the write history:
// no write by a replica that did not hold the Lease at that moment (by the Lease's acquireTime,
// which the acquiring pod writes, on this machine's clock like PostgreSQL's), and no stack
// written by two replicas in overlapping intervals. Then every stack matches the cluster
// (`pulumi-operator preview --expect-no-changes`, the CLI's own preview) and no lock is left.
// The figures (cut to the kill of the leader's pulumi processes, fault to the new leader) are
// logged for docs/benchmarks.md.
func TestPartition(t *testing.T) {
	n := connect(t)
	pg := partitionPostgres(t)
	opNS, sel := "pulumi-operator-part", "app.kubernetes.io/instance=part"
	n.restrictedNamespace(t, opNS)
	helm := filepath.Join(testenv.RepoRoot(), "bin", "helm")
	podURL := fmt.Sprintf("postgres://pulumi@%s:%s/pulumi?sslmode=disable", nodeIP, partitionPGPort)
	t.Logf("helm install:\n%s", run(t, nil, helm, "install", "part", "charts/pulumi-operator", "--kubeconfig", n.kubeconfig,
		"--namespace", opNS, "--set", "replicas=2", "--set-string", "backendURL="+podURL,
		"--set-string", "backendCredentials.pgpassword="+pg.password, "--set", "persistence.enabled=false",
		"--set-string", "passphrase="+partitionPhrase, "--set", "clusterName=partition", "--set", "logFormat=text"))
	t.Cleanup(func() {
		if t.Failed() {
			n.dumpOperator(t, opNS, sel)
		}
		if out, err := execOut(helm, "uninstall", "part", "--kubeconfig", n.kubeconfig, "--namespace", opNS, "--wait"); err != nil {
			t.Logf("helm uninstall: %v\n%s", err, out)
		}
	})
	leases := watchLease(t, n, opNS)
	t.Cleanup(func() { // before the dump (cleanups run last first)
		if t.Failed() {
			t.Logf("on failure: operator pods (restarts) %s; Lease tenures %s", n.podRestarts(opNS, sel), leases)
		}
	})
	within(t, operatorStart, "two operator pods Ready, one leading", func(ctx context.Context) (bool, error) {
		return len(n.readyPods(ctx, opNS, sel)) == 2 && leases.holder() != "", nil
	})

	ns := "partition-e2e"
	n.restrictedNamespace(t, ns)
	var names []string
	for i := range partitionObjects {
		name := fmt.Sprintf("p%02d", i)
		u := sample(t, ns, name, "localhost,8080\n")
		if err := unstructured.SetNestedField(u.Object, int64(1), "spec", "replicaCount"); err != nil {
			t.Fatal(err)
		}
		if _, err := n.dyn.Resource(crs).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	for _, name := range names {
		n.waitReady(t, ns, name, reconcile)
	}

	for _, fault := range []string{"cut", "cut during the SIGTERM grace", "pause"} {
		t.Run(fault, func(t *testing.T) { partitionFault(t, n, pg, leases, opNS, sel, ns, names, fault) })
	}

	for _, name := range names { // a fault that failed early left changes under way
		n.waitReady(t, ns, name, reconcile)
	}
	// The history, checked whatever the faults' own checks found.
	writes := pg.writes(t)
	tenures := leases.tenures()
	bad, overlaps := checkHistory(writes, tenures)
	t.Logf("write history: %d writes by %d replicas over %d Lease tenures; writes by a replica not holding the Lease: %d; stacks written by two replicas in overlapping intervals: %d",
		len(writes), len(writersOf(writes)), len(tenures), len(bad), len(overlaps))
	for _, b := range bad {
		t.Errorf("write by a replica that did not hold the Lease: %s", b)
	}
	for _, o := range overlaps {
		t.Errorf("overlapping writers: %s", o)
	}
	if len(writersOf(writes)) < 2 {
		t.Errorf("writes by %v: want both replicas to have written (each led once)", writersOf(writes))
	}
	within(t, time.Minute, "no lock left", func(context.Context) (bool, error) {
		return len(pg.query(t, "SELECT key FROM pulumi_state WHERE key LIKE '%.pulumi/locks/%'")) == 0, nil
	})
	previewNoChanges(t, n, pg, ns, names)
}

// partitionFault makes fault happen to the leader while ups run, and waits for the follower to
// lead and every object to be Ready again.
func partitionFault(t *testing.T, n *node, pg *partitionPG, leases *leaseWatch, opNS, sel, ns string, names []string, fault string) {
	ctx := context.Background()
	var leader string
	within(t, time.Minute, "a replica leading", func(context.Context) (bool, error) {
		leader = leases.holder()
		return leader != "", nil
	})
	uid := n.podUID(t, opNS, leader)
	restarts := n.restarts(t, opNS, leader)
	t.Logf("%s: leader %s; operator pods (restarts) %s; Lease tenures %s", fault, leader, n.podRestarts(opNS, sel), leases)
	churn := startChurn(n, ns, names)
	stopped := false
	stopChurn := func() {
		if !stopped {
			stopped = true
			churn()
		}
	}
	defer stopChurn()
	// An up of the leader holding a lock: the fault meets work under way.
	polls := 0
	within(t, time.Minute, "an up of the leader holding a stack's lock", func(context.Context) (bool, error) {
		locks, procs := pg.query(t, "SELECT key FROM pulumi_state WHERE key LIKE '%.pulumi/locks/%'"), pulumiProcs(uid)
		if polls++; polls%20 == 0 {
			t.Logf("waiting for an up: %d locks, %d pulumi processes in pod %s (uid %s)", len(locks), len(procs), leader, uid)
		}
		return len(locks) > 0 && len(procs) > 0, nil
	})
	before := pulumiProcs(uid)
	// No fault yet: a Lease that moved meanwhile is a leader lost for no reason (and the fault
	// below would hit a follower).
	if h := leases.holder(); h != leader {
		t.Fatalf("the Lease moved from %s to %q before any fault: operator pods (restarts) %s; Lease tenures %s", leader, h, n.podRestarts(opNS, sel), leases)
	}
	seen := len(leases.tenures())
	var heal func()
	at := time.Now()
	switch fault {
	case "cut":
		heal = prepareCut(t, n, uid)()
	case "cut during the SIGTERM grace":
		// The cut follows the delete at once: the up under way then hangs on the API server, so
		// the grace (25 s) would let it run past the earliest takeover, were it not fenced.
		cut := prepareCut(t, n, uid)
		if err := n.kube.CoreV1().Pods(opNS).Delete(ctx, leader, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete the leader's pod %s: %v", leader, err)
		}
		at = time.Now()
		heal = cut()
	case "pause":
		op := podOperator(uid)
		if op == 0 {
			t.Fatal("found no operator process in the leader's pod")
		}
		if err := syscall.Kill(op, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		heal = func() { _ = syscall.Kill(op, syscall.SIGCONT) }
	}
	defer heal()
	t.Logf("%s at %s: leader %s, running %d pulumi processes", fault, at.Format("15:04:05.000"), leader, len(before))

	var gone time.Time
	within(t, time.Minute, "the leader's pulumi processes ended", func(context.Context) (bool, error) {
		if len(pulumiProcs(uid)) == 0 {
			gone = time.Now()
			return true, nil
		}
		return false, nil
	})
	var next tenure
	within(t, time.Minute, "another replica leading", func(context.Context) (bool, error) {
		for _, ts := range leases.tenures()[seen:] { // the first holder since the fault
			if ts.pod != leader && ts.pod != "" {
				next = ts
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("%s: the leader's pulumi processes ended %s after the fault; %s acquired the Lease %s after it (%s after they ended)",
		fault, gone.Sub(at).Round(100*time.Millisecond), next.pod, next.from.Sub(at).Round(100*time.Millisecond), next.from.Sub(gone).Round(100*time.Millisecond))
	if !gone.Before(next.from) {
		t.Errorf("the old leader's pulumi processes ended at %s, not before the new leader acquired the Lease at %s (Lease tenures %s)", gone.Format("15:04:05.000"), next.from.Format("15:04:05.000"), leases)
	}
	heal()
	if fault == "pause" {
		within(t, time.Minute, "the resumed old leader restarted as a follower", func(context.Context) (bool, error) {
			return n.restarts(t, opNS, leader) > restarts, nil
		})
	}
	stopChurn()
	for _, name := range names {
		n.waitReady(t, ns, name, reconcile)
	}
	within(t, operatorStart, "two operator pods Ready again", func(ctx context.Context) (bool, error) {
		return len(n.readyPods(ctx, opNS, sel)) == 2, nil
	})
}

// readyPods lists the Ready pods of selector sel in ns that are not being deleted.
func (n *node) readyPods(ctx context.Context, ns, sel string) []string {
	pods, err := n.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) {
			out = append(out, p.Name)
		}
	}
	return out
}

// pulumiProcs lists the pulumi processes (the engine host, CLI runs, provider plugins) of pod uid.
func pulumiProcs(uid string) []int {
	var out []int
	for _, p := range hostProcs() {
		if !p.inPod(uid) || len(p.argv) == 0 {
			continue
		}
		switch filepath.Base(p.argv[0]) {
		case "pulumi", "pulumi-operator-engine", "pulumi-resource-kubernetes":
			out = append(out, p.pid)
		}
	}
	return out
}

// podOperator is the host pid of pod uid's operator process: the child of the container's PID 1
// (internal/initproc), 0 when there is none.
func podOperator(uid string) int {
	init := podInit(uid)
	for _, p := range hostProcs() {
		if p.ppid == init && init != 0 && len(p.argv) > 0 && filepath.Base(p.argv[0]) == "pulumi-operator" {
			return p.pid
		}
	}
	return 0
}

// prepareCut returns the cut of pod uid from the API server: every packet between the pod and the
// server (the kubernetes Service's address and the server's own) dropped in the pod's network
// namespace, both ways, without a reset, so that connections hang as on a partition. The cut
// returns the heal (idempotent). Both are prepared first, so that the cut itself is one nft call.
func prepareCut(t *testing.T, n *node, uid string) (cut func() (heal func())) {
	t.Helper()
	init := podInit(uid)
	if init == 0 {
		t.Fatal("found no process of the pod to enter its network namespace")
	}
	svc, err := n.kube.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := svc.Spec.ClusterIP
	rules := fmt.Sprintf(`table inet partition {
  chain out { type filter hook output priority 0; policy accept; ip daddr %[1]s drop; ip daddr %[2]s tcp dport 6443 drop; }
  chain in { type filter hook input priority 0; policy accept; ip saddr %[1]s drop; ip saddr %[2]s tcp sport 6443 drop; }
}
`, ip, nodeIP)
	// The namespace is entered by a path, which stays valid while the pod's sandbox lives.
	netns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", init))
	if err != nil {
		t.Fatal(err)
	}
	return func() func() {
		cmd := exec.Command("nsenter", "-t", fmt.Sprint(init), "-n", "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("cut the pod off the API server: %v\n%s", err, out)
		}
		var once sync.Once
		return func() {
			once.Do(func() {
				// Any process of the pod still in that namespace (its container may have restarted;
				// the pod may be gone, its namespace with it).
				for _, p := range hostProcs() {
					if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.pid)); err == nil && l == netns && p.inPod(uid) {
						_, _ = execOut("nsenter", "-t", fmt.Sprint(p.pid), "-n", "nft", "delete", "table", "inet", "partition")
						return
					}
				}
			})
		}
	}
}

// startChurn changes the objects' configMapData one after another, every 700 ms, so that ups
// keep running, until the returned stop is called (at most 10 minutes, 900 changes).
func startChurn(n *node, ns string, names []string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		deadline := time.Now().Add(10 * time.Minute)
		for i := 0; i < 900 && time.Now().Before(deadline); i++ {
			select {
			case <-done:
				return
			case <-time.After(700 * time.Millisecond):
			}
			name := names[i%len(names)]
			patch := fmt.Sprintf(`{"spec":{"configMapData":{"hostports":"localhost,%d\n"}}}`, 8000+i)
			_, _ = n.dyn.Resource(crs).Namespace(ns).Patch(context.Background(), name, "application/merge-patch+json", []byte(patch), metav1.PatchOptions{})
		}
	}()
	return func() { close(done); wg.Wait() }
}

// tenure is one holding of the Lease: by pod, from its acquireTime.
type tenure struct {
	pod  string
	from time.Time
}

// leaseWatch records every holder of the chart's Lease and when it acquired it.
type leaseWatch struct {
	mu sync.Mutex
	ts []tenure
}

// watchLease polls the Lease of namespace ns every 100 ms until the test ends.
func watchLease(t *testing.T, n *node, ns string) *leaseWatch {
	w := &leaseWatch{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if l, err := n.kube.CoordinationV1().Leases(ns).Get(context.Background(), partitionLease, metav1.GetOptions{}); err == nil && l.Spec.AcquireTime != nil {
				pod := ""
				if l.Spec.HolderIdentity != nil {
					pod, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
				}
				w.mu.Lock()
				if k := len(w.ts); k == 0 || w.ts[k-1].pod != pod || !w.ts[k-1].from.Equal(l.Spec.AcquireTime.Time) {
					w.ts = append(w.ts, tenure{pod, l.Spec.AcquireTime.Time})
				}
				w.mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(done); wg.Wait() })
	return w
}

// holder is the pod holding the Lease now, "" when none.
func (w *leaseWatch) holder() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.ts) == 0 {
		return ""
	}
	return w.ts[len(w.ts)-1].pod
}

// String lists the tenures seen, "pod@15:04:05.000" each, in order.
func (w *leaseWatch) String() string {
	var parts []string
	for _, ts := range w.tenures() {
		parts = append(parts, fmt.Sprintf("%s@%s", cmp.Or(ts.pod, "(released)"), ts.from.Format("15:04:05.000")))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// podRestarts lists the pods of selector sel in ns with their first container's restart count,
// "name(N)" each, and "deleting" for a pod being deleted.
func (n *node) podRestarts(ns, sel string) string {
	pods, err := n.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range pods.Items {
		r := int32(-1)
		if len(p.Status.ContainerStatuses) > 0 {
			r = p.Status.ContainerStatuses[0].RestartCount
		}
		part := fmt.Sprintf("%s(%d)", p.Name, r)
		if p.DeletionTimestamp != nil {
			part += " deleting"
		}
		parts = append(parts, part)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// tenures is every holding seen, in order.
func (w *leaseWatch) tenures() []tenure {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.ts)
}

// stateWrite is one row of the write history.
type stateWrite struct {
	at         time.Time
	writer, op string
	key        string
}

func (w stateWrite) String() string {
	return fmt.Sprintf("%s %s %s %s", w.at.Format("15:04:05.000000"), w.writer, w.op, w.key)
}

// checkHistory checks writes (in order) against the Lease's tenures: bad lists each write by an
// operator replica that did not hold the Lease at its time; overlaps each stack written by two
// replicas in intervals (first to last write of one replica's tenure) that intersect.
func checkHistory(writes []stateWrite, tenures []tenure) (bad, overlaps []string) {
	holderAt := func(at time.Time) (string, int) {
		i := sort.Search(len(tenures), func(i int) bool { return tenures[i].from.After(at) }) - 1
		if i < 0 {
			return "", -1
		}
		return tenures[i].pod, i
	}
	type span struct {
		writer      string
		first, last time.Time
	}
	spans := map[string]map[string]*span{} // stack -> writer/tenure -> span
	for _, w := range writes {
		pod, ok := strings.CutPrefix(w.writer, "pulumi-operator@")
		if !ok {
			continue // not an operator replica (this test's own reads)
		}
		holder, ti := holderAt(w.at)
		if holder != pod {
			bad = append(bad, fmt.Sprintf("%s (the Lease was %q's)", w, holder))
		}
		stack := stackOfKey(w.key)
		if spans[stack] == nil {
			spans[stack] = map[string]*span{}
		}
		id := fmt.Sprintf("%s#%d", pod, ti)
		if s := spans[stack][id]; s != nil {
			s.last = w.at
		} else {
			spans[stack][id] = &span{pod, w.at, w.at}
		}
	}
	for stack, byWriter := range spans {
		var ss []*span
		for _, s := range byWriter {
			ss = append(ss, s)
		}
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				a, b := ss[i], ss[j]
				if a.writer != b.writer && !a.last.Before(b.first) && !b.last.Before(a.first) {
					overlaps = append(overlaps, fmt.Sprintf("stack %s: %s %s..%s and %s %s..%s", stack, a.writer, a.first.Format("15:04:05.000"), a.last.Format("15:04:05.000"),
						b.writer, b.first.Format("15:04:05.000"), b.last.Format("15:04:05.000")))
				}
			}
		}
	}
	sort.Strings(overlaps)
	return bad, overlaps
}

// stackOfKey is the stack a backend key belongs to (its stack's file, lock, history or backup),
// the key itself for anything else.
func stackOfKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		if p == "kindcustomhttp" && i+1 < len(parts) {
			return strings.TrimSuffix(strings.TrimSuffix(parts[i+1], ".json"), ".json.bak")
		}
	}
	return key
}

func writersOf(writes []stateWrite) []string {
	var out []string
	for _, w := range writes {
		if strings.HasPrefix(w.writer, "pulumi-operator@") && !slices.Contains(out, w.writer) {
			out = append(out, w.writer)
		}
	}
	return out
}

// partitionPG is this test's PostgreSQL: reachable from the node's pods at nodeIP.
type partitionPG struct {
	url      string // on 127.0.0.1, with the password
	password string
}

// partitionPostgres starts a PostgreSQL of its own (hack/postgres-up.sh) listening on 127.0.0.1
// and on the node's bridge address, logins from the pod network allowed, with the Pulumi state
// table made in advance and a trigger recording every write of it (row insert, update, delete:
// every checkpoint save, history entry and lock change) with its connection's application_name,
// at the database's clock (clock_timestamp). It is stopped and removed when the test ends.
func partitionPostgres(t *testing.T) *partitionPG {
	t.Helper()
	root := testenv.RepoRoot()
	env := append(os.Environ(), "PG_DIR="+filepath.Join(root, ".local", "partition-postgres"), "PG_PORT="+partitionPGPort,
		"PG_LISTEN=127.0.0.1,"+nodeIP, "PG_HBA_CIDR=10.88.0.0/24")
	down := func() { _, _ = execOutEnv(env, filepath.Join(root, "hack", "postgres-down.sh"), "--purge") }
	down()
	out, err := execOutEnv(env, filepath.Join(root, "hack", "postgres-up.sh"))
	if err != nil {
		t.Fatalf("hack/postgres-up.sh: %v\n%s", err, out)
	}
	t.Cleanup(down)
	var raw string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export PULUMI_TEST_POSTGRES_URL="); ok {
			raw = strings.Trim(v, "'")
		}
	}
	u, err := url.Parse(raw)
	if err != nil || raw == "" {
		t.Fatalf("no URL from hack/postgres-up.sh:\n%s", out)
	}
	password, _ := u.User.Password()
	pg := &partitionPG{url: raw, password: password}
	// The schema is pkg/v3's (backend/diy/postgres/schema.sql): the backend's CREATE TABLE IF NOT
	// EXISTS then finds it.
	pg.query(t, `CREATE TABLE IF NOT EXISTS pulumi_state (key TEXT PRIMARY KEY, data JSON NOT NULL, updated_at TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS pulumi_state_key_prefix_idx ON pulumi_state (key text_pattern_ops);
CREATE TABLE write_history (id BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(), writer TEXT NOT NULL, op TEXT NOT NULL, key TEXT NOT NULL);
CREATE FUNCTION record_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO write_history (writer, op, key) VALUES (current_setting('application_name'), TG_OP, COALESCE(NEW.key, OLD.key));
  RETURN NULL;
END $$;
CREATE TRIGGER record_write AFTER INSERT OR UPDATE OR DELETE ON pulumi_state FOR EACH ROW EXECUTE FUNCTION record_write();`)
	return pg
}

// query runs q and returns its rows.
func (pg *partitionPG) query(t *testing.T, q string) []string {
	t.Helper()
	return testenv.PSQL(t, pg.url, q)
}

// writes reads the write history, in order.
func (pg *partitionPG) writes(t *testing.T) []stateWrite {
	t.Helper()
	var out []stateWrite
	for _, row := range pg.query(t, `SELECT to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), writer, op, key FROM write_history ORDER BY id`) {
		f := strings.SplitN(row, "|", 4)
		if len(f) != 4 {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			t.Fatalf("write history time %q: %v", f[0], err)
		}
		out = append(out, stateWrite{at, f[1], f[2], f[3]})
	}
	return out
}

// previewNoChanges runs `pulumi-operator preview --expect-no-changes` of the live objects from
// this host, on the same stacks (backend, cluster name, passphrase), and fails unless it exits 0:
// every stack's state matches the cluster.
func previewNoChanges(t *testing.T, n *node, pg *partitionPG, ns string, names []string) {
	t.Helper()
	dir := t.TempDir()
	var docs []string
	for _, name := range names {
		cr, err := n.dyn.Resource(crs).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(cr.Object)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(b))
	}
	file := filepath.Join(dir, "objects.yaml")
	if err := os.WriteFile(file, []byte(strings.Join(docs, "---\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(pg.url)
	u.User = url.User(u.User.Username())
	root := testenv.RepoRoot()
	cmd := exec.Command(filepath.Join(root, "bin", "pulumi-operator"), "--kubeconfig", n.kubeconfig, "--backend-url", u.String(),
		"--cluster-name", "partition", "--state-dir", filepath.Join(dir, "state"), "--pulumi", filepath.Join(root, "bin", "pulumi"),
		"preview", "-f", file, "--expect-no-changes", "--parallel", "2")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pg.password, "PULUMI_CONFIG_PASSPHRASE="+partitionPhrase)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("preview --expect-no-changes of the %d stacks: %v\n%s", len(names), err, out)
	}
	t.Logf("preview --expect-no-changes: all %d stacks match the cluster", len(names))
}
