package crash

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// crashEnv opts in to TestCrashSafety, which takes several minutes.
const crashEnv = "PULUMI_OPERATOR_CRASH_TEST"

// TestCrashSafety kills the operator at random moments while it creates, changes and deletes
// objects, and checks that nothing is lost, orphaned or stuck once it has converged.
//
// Each kill is a container kill: SIGKILL to the operator and every process it started (pulumi
// CLIs, provider plugins), at a random moment 0.5 to 3 s after the previous one, or (half of
// them, to hit operations in flight) 0.5 to 3 s after the next up or destroy started; the
// operator is restarted at once with the same state directory. A quarter of the kills hit only
// the pulumi processes (the OOM killer's choice in a container) when there are any, and the
// operator lives on. Meanwhile objects are created, their replicaCount and configMapData
// changed, and some deleted (and a deleted name created again). After the last restart the
// operator runs to convergence and checkState compares backend and cluster.
//
// Opt-in (it takes minutes): PULUMI_OPERATOR_CRASH_TEST=1 go test ./crash -run TestCrashSafety
// (`make crash-test`). CRASH_SEED=<n> replays a run's random choices (the seed is logged; the
// timing of a real process still differs); CRASH_KILLS=<n> sets the container kills per
// backend (default 20). The postgres case needs PULUMI_TEST_POSTGRES_URL.
func TestCrashSafety(t *testing.T) {
	if os.Getenv(crashEnv) != "1" {
		t.Skipf("SKIP: TestCrashSafety takes minutes: run it with %s=1 (make crash-test)", crashEnv)
	}
	requirePlugin(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv("CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", s, err)
		}
	}
	kills := 20
	if s := os.Getenv("CRASH_KILLS"); s != "" {
		var err error
		if kills, err = strconv.Atoi(s); err != nil || kills < 1 {
			t.Fatalf("CRASH_KILLS=%q: want a positive number", s)
		}
	}
	t.Logf("CRASH_SEED=%d CRASH_KILLS=%d", seed, kills)

	for name, tc := range map[string]struct {
		// backendURL returns the backend for a state directory.
		backendURL func(t *testing.T, stateDir string) string
		// wipeWorkspaces deletes the workspaces on every fourth restart: a pod replaced with its
		// state directory on an emptyDir, which config/manager/state.yaml calls enough for a
		// remote backend.
		wipeWorkspaces bool
	}{
		"file": {backendURL: func(t *testing.T, stateDir string) string {
			return "file://" + filepath.Join(stateDir, "backend")
		}},
		"postgres": {backendURL: func(t *testing.T, _ string) string {
			return requireEnv(t, "PULUMI_TEST_POSTGRES_URL", "start PostgreSQL with `eval \"$(hack/postgres-up.sh)\"`")
		}, wipeWorkspaces: true},
	} {
		t.Run(name, func(t *testing.T) {
			stateDir := t.TempDir()
			crashRun(t, rand.New(rand.NewSource(seed)), kills, tc.backendURL(t, stateDir), stateDir, tc.wipeWorkspaces)
		})
	}
}

// world is what the test has asked of the cluster: the spec of every object that should
// exist, and the objects deleted.
type world struct {
	mu      sync.Mutex
	live    map[string]spec
	gone    map[string]bool
	created int
	actions map[string]int
}

func (w *world) snapshot() (map[string]spec, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	live := make(map[string]spec, len(w.live))
	for k, v := range w.live {
		live[k] = v
	}
	var gone []string
	for k := range w.gone {
		gone = append(gone, k)
	}
	sort.Strings(gone)
	return live, gone
}

func randomSpec(rng *rand.Rand) spec {
	data := map[string]string{"hostports": fmt.Sprintf("peer-%d,8080\n", rng.Intn(1000))}
	if rng.Intn(2) == 0 {
		data["extra.txt"] = strconv.Itoa(rng.Intn(1000))
	}
	return spec{replicas: int64(rng.Intn(4)), data: data}
}

func crashRun(t *testing.T, rng *rand.Rand, kills int, backendURL, stateDir string, wipeWorkspaces bool) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase = "crash-test-passphrase"
	const cluster = "crash"
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: c.Kubeconfig, backendURL: backendURL,
		stateDir: stateDir, cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
	// Cleanups run last-registered first: objects deleted (with the operator running, so their
	// stacks are destroyed) before the operator stops and the namespace goes.
	t.Cleanup(func() {
		if op.pid() == 0 {
			op.start()
		}
		deleteAllAndWait(t, c, ns, 4*time.Minute)
	})

	w := &world{live: map[string]spec{}, gone: map[string]bool{}, actions: map[string]int{}}
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("c%d", i)
		s := randomSpec(rng)
		if err := createCR(ctx, c, ns, name, s, nil); err != nil {
			t.Fatal(err)
		}
		w.live[name] = s
		w.created++
	}
	op.start()

	// The workload: a change every 0.5 to 2 s, from a generator of its own so that kills and
	// changes each replay from the seed.
	driveCtx, stopDriving := context.WithCancel(ctx)
	driven := make(chan struct{})
	go func() {
		defer close(driven)
		drive(driveCtx, t, c, ns, w, rand.New(rand.NewSource(rng.Int63())))
	}()

	start := time.Now()
	containerKills, pulumiKills, processesKilled, wipes := 0, 0, 0, 0
	mark := 0 // log offset of the running operator's start
	for containerKills < kills {
		if rng.Intn(2) == 0 {
			// Aim at an operation: wait for the next up or destroy of this run to start first.
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) && !strings.Contains(op.logs.since(mark), `msg="running `) {
				time.Sleep(50 * time.Millisecond)
			}
			mark = op.logs.Len()
		}
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int63n(int64(2500*time.Millisecond))))
		if rng.Intn(4) == 0 {
			if n := op.killPulumi(); n > 0 {
				pulumiKills++
				processesKilled += n
				continue
			}
		}
		processesKilled += op.kill()
		containerKills++
		if wipeWorkspaces && containerKills%4 == 0 {
			if err := os.RemoveAll(filepath.Join(stateDir, "workspaces")); err != nil {
				t.Fatal(err)
			}
			wipes++
		}
		mark = op.logs.Len()
		op.start()
	}
	stopDriving()
	<-driven
	killPhase := time.Since(start)
	live, gone := w.snapshot()
	logAtEnd := op.logs.Len()
	took, why := converge(c, ns, live, gone, 8*time.Minute)
	if len(why) > 0 {
		t.Errorf("not converged within 8m after the last restart:\n  %s", strings.Join(why, "\n  "))
	}

	b := openBackend(t, backendURL, cluster, passphrase)
	rep := checkState(t, c, b, ns, live)
	orphans := op.orphans()
	if len(orphans) > 0 {
		t.Errorf("%d processes of killed pulumi runs still running after convergence:\n  %s", len(orphans), strings.Join(orphans, "\n  "))
	}
	logs := op.logs.String()
	t.Logf("kills survived: %d container kills (%d processes, operator restarts: %d, workspace wipes: %d) and %d pulumi-only kills in %s; "+
		"actions %v; converged %s after the last restart (%d up runs after it); stacks checked %d (resources %d, cluster objects %d); "+
		"log: %d \"running up\", %d \"running destroy\", %d \"cancelled stale lock\", %d \"resolved pending operations\", %d \"stack locked\", %d \"reconcile failed\"",
		containerKills, processesKilled, op.starts-1, wipes, pulumiKills, killPhase.Round(time.Second),
		w.actions, took.Round(time.Second), countLines(logs[logAtEnd:], "running up"), rep.stacks, rep.resources, rep.liveObjects,
		countLines(logs, "running up"), countLines(logs, "running destroy"), countLines(logs, "cancelled stale lock"),
		countLines(logs, "resolved pending operations"), countLines(logs, "stack locked"), countLines(logs, "reconcile failed"))
	if t.Failed() {
		reportFailures(t, logs)
	}
}

// drive changes the objects until ctx ends: mostly spec changes, some deletes, creates, and
// re-creates of deleted names once they are gone.
func drive(ctx context.Context, t *testing.T, c *testenv.Cluster, ns string, w *world, rng *rand.Rand) {
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(500*time.Millisecond + time.Duration(rng.Int63n(int64(1500*time.Millisecond)))):
		}
		w.mu.Lock()
		var names []string
		for n := range w.live {
			names = append(names, n)
		}
		sort.Strings(names)
		var goneNames []string
		for n := range w.gone {
			goneNames = append(goneNames, n)
		}
		sort.Strings(goneNames)
		roll := rng.Intn(100)
		var err error
		switch {
		case roll < 10 && len(names) > 5:
			name := names[rng.Intn(len(names))]
			if err = cr.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				delete(w.live, name)
				w.gone[name] = true
				w.actions["delete"]++
			}
		case roll < 17 && w.created < 12:
			name := fmt.Sprintf("c%d", w.created)
			s := randomSpec(rng)
			if err = createCR(ctx, c, ns, name, s, nil); err == nil {
				w.live[name] = s
				w.created++
				w.actions["create"]++
			}
		case roll < 22 && len(goneNames) > 0:
			name := goneNames[rng.Intn(len(goneNames))]
			if _, gerr := cr.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
				s := randomSpec(rng)
				if err = createCR(ctx, c, ns, name, s, nil); err == nil {
					delete(w.gone, name)
					w.live[name] = s
					w.actions["recreate"]++
				}
			}
		default:
			name := names[rng.Intn(len(names))]
			s := randomSpec(rng)
			if err = patchCR(ctx, c, ns, name, s); err == nil {
				w.live[name] = s
				w.actions["change"]++
			}
		}
		w.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			t.Errorf("workload: %v", err)
		}
	}
}

// reportFailures logs the distinct failure messages of the operator's log, the first place to
// look when the state check fails.
func reportFailures(t *testing.T, logs string) {
	t.Helper()
	seen := map[string]int{}
	for _, l := range strings.Split(logs, "\n") {
		if !strings.Contains(l, "level=ERROR") && !strings.Contains(l, "level=WARN") {
			continue
		}
		_, msg, _ := strings.Cut(l, " level=")
		if i := strings.Index(msg, " object="); i >= 0 {
			if j := strings.Index(msg, " err="); j > i {
				msg = msg[:i] + msg[j:]
			}
		}
		if len(msg) > 600 {
			msg = msg[:600] + "..."
		}
		seen[msg]++
	}
	var lines []string
	for m, n := range seen {
		lines = append(lines, fmt.Sprintf("%4dx %s", n, m))
	}
	sort.Strings(lines)
	t.Logf("distinct warnings and errors in the operator's log:\n%s", strings.Join(lines, "\n"))
}
