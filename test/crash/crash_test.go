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
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// crashEnv opts in to the long run of TestCrashSafety, which takes several minutes.
const crashEnv = "PULUMI_OPERATOR_CRASH_TEST"

// TestCrashSafety kills the operator at random moments while it creates, changes and deletes
// objects, and checks that nothing is lost, orphaned or stuck once it has converged.
//
// Each kill is a container kill: SIGKILL to the operator and every process it started (pulumi
// CLIs, provider plugins), and the operator is restarted at once with the same state
// directory. A quarter of the kills hit only the pulumi processes (the OOM killer's choice in a
// container) when there are any, and the operator lives on. Meanwhile objects are created,
// their replicaCount and configMapData changed, and some deleted (and a deleted name created
// again). After the last restart the operator runs to convergence and checkState compares
// backend and cluster: one stack per object, no lock, no pending operation, state and cluster
// equal object by object; and no process of a killed run may be left.
//
// Every kill but the last waits for a moment of its own (killAim): anywhere, inUpdate (an up or
// destroy holds its stack's lock) or inStep (the state holds a pending operation: a resource is
// being changed). The last kill is a container kill aimed inStep, so that the operator that
// runs to the end has pending operations to resolve, and must say so.
//
// The kills must have hit what they are for: at least one must have killed an up or destroy in
// flight, and at least one must have left a lock in the backend, which the operator must have
// cleared ("cancelled stale lock" in its log): the recovery path ran. Two runs:
//   - the short run (always; `make test`): 3 container kills on the file backend (twice: see
//     below), the first ones aimed inUpdate (0 to 0.5 s after the lock). That any kill leaves
//     a pending operation is not required: the last one is aimed at one, but a resource change
//     can end before the kill comes.
//   - the long run (opt-in: PULUMI_OPERATOR_CRASH_TEST=1, `make crash-test`): 20 container kills
//     on the file and the PostgreSQL backend, aimed anywhere, inUpdate (0 to 3 s after the
//     lock) or inStep. Enough kills that it must have cleared stale locks and resolved pending
//     operations ("resolved pending operations" in the operator's log), not only survived.
//
// Each run is made twice on the file backend: with every up a pulumi CLI process ("file"), and
// with the operator's ups in its engine host ("file-engine-host", --engine-host), whose kill is
// a kill of every up it was running at once.
//
// CRASH_SEED=<n> replays a run's random choices (the seed is logged; the timing of a real
// process still differs); CRASH_KILLS=<n> sets the container kills per backend. The postgres
// case needs PULUMI_TEST_POSTGRES_URL.
func TestCrashSafety(t *testing.T) {
	requirePlugin(t)
	long := os.Getenv(crashEnv) == "1"
	plan := crashPlan{kills: 3, objects: 4, minLive: 3, maxCreated: 6, aims: []killAim{inUpdate}, aimDelay: 500 * time.Millisecond}
	// file-engine-host: the file backend with the operator's ups in its engine host
	// (--engine-host) instead of a pulumi CLI process each.
	backends := []string{"file", "file-engine-host"}
	if long {
		plan = crashPlan{kills: 20, objects: 6, minLive: 5, maxCreated: 12, aims: []killAim{anywhere, inUpdate, inStep},
			aimDelay: 3 * time.Second, requireRecoveries: true}
		backends = append(backends, "postgres")
	} else {
		t.Logf("the short run (file backend, %d kills); the long one: %s=1 (make crash-test)", plan.kills, crashEnv)
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("CRASH_SEED=%q: %v", s, err)
		}
	}
	if s := os.Getenv("CRASH_KILLS"); s != "" {
		var err error
		if plan.kills, err = strconv.Atoi(s); err != nil || plan.kills < 1 {
			t.Fatalf("CRASH_KILLS=%q: want a positive number", s)
		}
	}
	t.Logf("CRASH_SEED=%d CRASH_KILLS=%d", seed, plan.kills)

	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			stateDir := t.TempDir()
			p := plan
			backendURL := "file://" + filepath.Join(stateDir, "backend")
			if name == "postgres" {
				backendURL = requireEnv(t, "PULUMI_TEST_POSTGRES_URL", "start PostgreSQL with `eval \"$(hack/postgres-up.sh)\"`")
				// Delete the workspaces on every fourth restart: a pod replaced with its state
				// directory on an emptyDir, which config/manager/state.yaml calls enough for a
				// remote backend.
				p.wipeWorkspaces = true
			}
			engineHost := ""
			if name == "file-engine-host" {
				engineHost = testenv.EngineHost(t)
			}
			crashRun(t, rand.New(rand.NewSource(seed)), p, backendURL, stateDir, engineHost)
		})
	}
}

// crashPlan is what one crashRun does.
type crashPlan struct {
	// kills is the number of container kills.
	kills int
	// objects are created before the operator first starts; the workload deletes one only
	// while more than minLive live, and creates new names until maxCreated were made.
	objects, minLive, maxCreated int
	// aims are the moments a kill is aimed at, one picked at random for each kill but the last,
	// which is always aimed inStep; aimDelay is inUpdate's.
	aims     []killAim
	aimDelay time.Duration
	// wipeWorkspaces deletes the state directory's workspaces on every fourth restart.
	wipeWorkspaces bool
	// requireRecoveries fails the run unless the operator cleared at least one stale lock and
	// resolved at least one pending operation: with few kills neither is certain to be needed.
	requireRecoveries bool
}

// killAim is the moment a kill waits for.
type killAim int

const (
	// anywhere is 0.5 to 3 s after the previous kill: the operator may be starting, listing,
	// selecting stacks or idle.
	anywhere killAim = iota
	// inUpdate is 0 to crashPlan.aimDelay after a `pulumi up` or `pulumi destroy` has taken its
	// stack's lock: the kill leaves a stale lock. Not a time after the log says "running up",
	// nor after the CLI started: on a loaded machine the CLI can take seconds to get to the
	// lock, and such kills hit `pulumi stack select` or an up that has not begun.
	inUpdate
	// inStep is as soon as the state holds a pending operation of a Kubernetes object: one is
	// being created, changed or deleted, and the kill leaves the pending operation (and the
	// lock). That part of an up is short (the Deployment's the longest; the stack's and the
	// provider's own entries shorter still), and a kill at a random moment seldom hits it.
	inStep
)

// changingKubernetesObject reports whether pending (from backendPending) holds an operation
// on a Kubernetes object.
func changingKubernetesObject(pending []string) bool {
	for _, p := range pending {
		if strings.Contains(p, "::kubernetes:") {
			return true
		}
	}
	return false
}

// aimWait is how long an aimed kill waits for its moment before it kills anyway.
const aimWait = 30 * time.Second

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

// crashRun runs plan against the backend backendURL (the file backend's directory is under
// stateDir) and checks the outcome; see TestCrashSafety.
func crashRun(t *testing.T, rng *rand.Rand, plan crashPlan, backendURL, stateDir, engineHost string) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase = "crash-test-passphrase"
	const cluster = "crash"
	op := newOperator(t, operatorConfig{name: "operator", kubeconfig: c.Kubeconfig, backendURL: backendURL,
		stateDir: stateDir, cluster: cluster, namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase},
		engineHost: engineHost})
	// Cleanups run last-registered first: objects deleted (with the operator running, so their
	// stacks are destroyed) before the operator stops and the namespace goes.
	t.Cleanup(func() {
		if op.pid() == 0 {
			op.start()
		}
		deleteAllAndWait(t, c, ns, 4*time.Minute)
	})

	w := &world{live: map[string]spec{}, gone: map[string]bool{}, actions: map[string]int{}}
	for i := 0; i < plan.objects; i++ {
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
		drive(driveCtx, t, c, ns, w, plan, rand.New(rand.NewSource(rng.Int63())))
	}()
	// A test that stops early (t.Fatal) stops the workload before the objects are deleted.
	t.Cleanup(func() { stopDriving(); <-driven })

	start := time.Now()
	containerKills, pulumiKills, processesKilled, wipes := 0, 0, 0, 0
	// What the kills hit: the pulumi operations running when they came (operation -> processes
	// killed), how many kills killed an up or a destroy in flight, and the locks and pending
	// operations that container kills left in the backend. Those are read before the restart,
	// when no process of the operator runs, so each lock is stale (only the operator's
	// stale-lock path can remove it) and each pending operation a dead update's.
	killedOps := map[string]int{}
	inFlightKills := 0
	locksLeft, pendingLeft := map[string]bool{}, map[string]bool{}
	// locked says whether the backend held a lock right after the kill: an engine host runs
	// between its ups too, so killing one interrupted an up only if that left a lock.
	record := func(killed []string, locked bool) {
		processesKilled += len(killed)
		hit := false
		for _, l := range killed {
			if o := pulumiOperation(l); o != "" {
				killedOps[o]++
				inFlight := o == "up" || o == "destroy"
				if stackArg(l) == "" && o == "up" { // the engine host
					inFlight = locked
				}
				hit = hit || inFlight
			}
		}
		if hit {
			inFlightKills++
		}
	}
	lockedNow := func() bool { return len(backendLocks(t, backendURL, cluster, ns)) > 0 }
	lastStart := 0           // log offset of the running operator's start
	var lastPending []string // pending operations the last kill left in the state
	for containerKills < plan.kills {
		last := containerKills == plan.kills-1
		aim := inStep
		if !last {
			aim = plan.aims[rng.Intn(len(plan.aims))]
		}
		deadline := time.Now().Add(aimWait)
		switch aim {
		case anywhere:
			time.Sleep(500*time.Millisecond + time.Duration(rng.Int63n(int64(2500*time.Millisecond))))
		case inUpdate:
			locks := func() []string { return backendLocks(t, backendURL, cluster, ns) }
			for time.Now().Before(deadline) && !op.lockedOperation(locks, "up", "destroy") {
				time.Sleep(100 * time.Millisecond)
			}
			time.Sleep(time.Duration(rng.Int63n(int64(plan.aimDelay))))
		case inStep:
			for time.Now().Before(deadline) && !changingKubernetesObject(backendPending(t, backendURL, cluster, ns)) {
				time.Sleep(20 * time.Millisecond)
			}
		}
		// The last kill is a container kill: the operator that runs to the end must find what
		// it left.
		if !last && rng.Intn(4) == 0 {
			if killed := op.killPulumi(); len(killed) > 0 {
				pulumiKills++
				record(killed, lockedNow())
				continue
			}
		}
		killed := op.kill()
		record(killed, lockedNow())
		containerKills++
		for _, l := range backendLocks(t, backendURL, cluster, ns) {
			locksLeft[l] = true
		}
		lastPending = backendPending(t, backendURL, cluster, ns)
		for _, p := range lastPending {
			pendingLeft[p] = true
		}
		if plan.wipeWorkspaces && containerKills%4 == 0 {
			if err := os.RemoveAll(filepath.Join(stateDir, "workspaces")); err != nil {
				t.Fatal(err)
			}
			wipes++
		}
		lastStart = op.logs.Len()
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
	cleared, resolved := countLines(logs, "cancelled stale lock"), countLines(logs, "resolved pending operations")
	events := eventCounts(t, c, ns)
	t.Logf("kills survived: %d container kills (%d processes, operator restarts: %d, workspace wipes: %d) and %d pulumi-only kills in %s; "+
		"%d kills hit an up or destroy in flight, pulumi processes killed by operation %v, %d locks and %d pending operations left by the kills (by the last: %v); "+
		"actions %v; converged %s after the last restart (%d up runs after it); stacks checked %d (resources %d, cluster objects %d); "+
		"log: %d \"running up\", %d \"running destroy\", %d \"cancelled stale lock\", %d \"resolved pending operations\", %d \"stack locked\", %d \"reconcile failed\"; "+
		"Events: %d %s, %d %s",
		containerKills, processesKilled, op.starts-1, wipes, pulumiKills, killPhase.Round(time.Second),
		inFlightKills, killedOps, len(locksLeft), len(pendingLeft), lastPending,
		w.actions, took.Round(time.Second), countLines(logs[logAtEnd:], "running up"), rep.stacks, rep.resources, rep.liveObjects,
		countLines(logs, "running up"), countLines(logs, "running destroy"), cleared,
		resolved, countLines(logs, "stack locked"), countLines(logs, "reconcile failed"),
		events[watcher.ReasonStaleLockCleared], watcher.ReasonStaleLockCleared, events[watcher.ReasonPendingOperationsResolved], watcher.ReasonPendingOperationsResolved)

	// The kills must have hit what they are for, and the recoveries must have happened.
	if inFlightKills == 0 {
		t.Errorf("none of the %d kills interrupted a running pulumi up or destroy (pulumi processes killed: %v): the recovery path was not exercised", containerKills+pulumiKills, killedOps)
	}
	if len(locksLeft) == 0 {
		t.Errorf("none of the %d container kills left a lock in the backend: the stale-lock path was not exercised", containerKills)
	}
	if len(locksLeft) > 0 && cleared == 0 {
		t.Errorf("the kills left %d locks in the backend and the operator's log never says \"cancelled stale lock\"", len(locksLeft))
	}
	// What the last kill left, the operator that ran to the end must have resolved and said so.
	// (Not so for earlier kills: a kill that follows the resolving loses its log line, which
	// comes when the up after it has finished.)
	if len(lastPending) > 0 && countLines(logs[lastStart:], "resolved pending operations") == 0 {
		t.Errorf("the last kill left pending operations %v and the last operator's log never says \"resolved pending operations\"", lastPending)
	}
	if plan.requireRecoveries {
		if cleared == 0 {
			t.Errorf("%d kills and no stale lock cleared (no \"cancelled stale lock\" in the operator's log): the kills did not interrupt updates, or the operator did not recover their locks", containerKills+pulumiKills)
		}
		if resolved == 0 {
			t.Errorf("%d kills and no pending operation resolved (no \"resolved pending operations\" in the operator's log): the kills did not interrupt resource operations, or the operator did not recover them", containerKills+pulumiKills)
		}
	}
	// The Events of the recoveries the last operator made (it ran to the end, so its Events
	// were sent; an earlier one's may be lost with it when a kill follows within milliseconds).
	for msg, reason := range map[string]string{"cancelled stale lock": watcher.ReasonStaleLockCleared,
		"resolved pending operations": watcher.ReasonPendingOperationsResolved} {
		if n := countLines(logs[lastStart:], msg); n > 0 && events[reason] == 0 {
			t.Errorf("the last operator's log has %d \"%s\" lines and the namespace no %s Event", n, msg, reason)
		}
	}
	if t.Failed() {
		reportFailures(t, logs)
	}
}

// drive changes the objects until ctx ends: mostly spec changes, some deletes, creates, and
// re-creates of deleted names once they are gone.
func drive(ctx context.Context, t *testing.T, c *testenv.Cluster, ns string, w *world, plan crashPlan, rng *rand.Rand) {
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
		case roll < 10 && len(names) > plan.minLive:
			name := names[rng.Intn(len(names))]
			if err = cr.Delete(ctx, name, metav1.DeleteOptions{}); err == nil {
				delete(w.live, name)
				w.gone[name] = true
				w.actions["delete"]++
			}
		case roll < 17 && w.created < plan.maxCreated:
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
