package watcher

import (
	"context"
	"errors"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	ktesting "k8s.io/client-go/testing"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
)

// A leader that loses its Lease cancels its operations and, when one does not stop within
// fence.KillAfter (its cancel cannot get through), kills the pulumi processes: run returns a few
// seconds after the loss, not after the shutdown grace, and before another replica may lead.
func TestUnitLeaseLossFences(t *testing.T) {
	f := newUnit(t, Options{ShutdownGrace: time.Minute})
	f.stacks.hangHard = true
	if err := f.dyn.Tracker().Add(kch("web", nil)); err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- f.w.run(context.Background(), lost, 1) }()
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(f.journal.take(), "up refresh=false"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the up never started")
		}
	}
	close(lost)
	start := time.Now()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run still runs 10 s after the Lease was lost")
	}
	took := time.Since(start)
	if took < fence.KillAfter || took > fence.KillAfter+3*time.Second {
		t.Errorf("run returned %s after the loss, want about fence.KillAfter (%s): a graceful try, then the kill", took, fence.KillAfter)
	}
	if got := f.journal.take(); !slices.Contains(got, "kill") {
		t.Errorf("journal %q: want the pulumi processes killed", got)
	}
}

// Becoming leader records this host in the Lease's lock holders (bounded, newest last) and
// takes the hosts recorded before as those whose locks may be removed; this host is never one.
func TestRecordLeader(t *testing.T) {
	host, _ := os.Hostname()
	var many []string
	for i := range 40 {
		many = append(many, "old-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	for name, tc := range map[string]struct {
		before      string
		wantFenced  []string
		wantHolders int
	}{
		"first leader":          {"", nil, 1},
		"after two pods":        {"pod-a,pod-b", []string{"pod-a", "pod-b"}, 3},
		"this host led before":  {host + ",pod-a", []string{"pod-a"}, 2},
		"bounded to the newest": {strings.Join(many, ","), many, maxLockHolders},
	} {
		t.Run(name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "lease",
				Annotations: map[string]string{}}}
			if tc.before != "" {
				lease.Annotations[LockHoldersAnnotation] = tc.before
			}
			kube := kubefake.NewClientset(lease)
			f := newUnit(t, Options{})
			if err := f.w.recordLeader(context.Background(), kube, LeaderElection{Namespace: "ops", Name: "lease"}); err != nil {
				t.Fatal(err)
			}
			l, err := kube.CoordinationV1().Leases("ops").Get(context.Background(), "lease", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			holders := strings.Split(l.Annotations[LockHoldersAnnotation], ",")
			if len(holders) != tc.wantHolders || holders[len(holders)-1] != host {
				t.Errorf("holders %v: want %d, this host last", holders, tc.wantHolders)
			}
			f.w.leading.Store(true)
			for _, h := range tc.wantFenced {
				if !f.w.fencedHost(h) {
					t.Errorf("%s not taken as an earlier holder", h)
				}
			}
			if f.w.fencedHost(host) {
				t.Error("this host's own locks taken as an earlier holder's")
			}
			f.w.leading.Store(false)
			if len(tc.wantFenced) > 0 && f.w.fencedHost(tc.wantFenced[0]) {
				t.Error("an earlier holder's locks removable while this process does not lead")
			}
		})
	}
}

// TestUnitRenewalHangsFences measures, with a Lease whose renewals hang (the API server cut off
// without a reset: every request waits, none fails), the time from the last successful renewal
// to the kill of the pulumi processes: it must be at most RenewDeadline + fence.KillAfter (plus
// scheduling slack), which fence.Validate keeps below LeaseDuration, the earliest moment another
// replica may lead. The leader decides on its own clock: client-go's elector, whose renewal and
// release hang, is not waited for. The same holds when the Lease stops renewing during a
// SIGTERM's grace. Short durations (6 s / 3 s / 0.5 s) keep the test short; the arithmetic is
// the defaults' (docs/design/fencing.md).
func TestUnitRenewalHangsFences(t *testing.T) {
	for name, sigterm := range map[string]bool{"leading": false, "during the SIGTERM grace": true} {
		t.Run(name, func(t *testing.T) {
			le := LeaderElection{Namespace: "ops", Name: "lease", LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
			f := newUnit(t, Options{ShutdownGrace: time.Minute})
			f.stacks.hangHard = true
			if err := f.dyn.Tracker().Add(kch("web", nil)); err != nil {
				t.Fatal(err)
			}
			election := kubefake.NewClientset()
			var (
				mu        sync.Mutex
				lastRenew time.Time
				cut       atomic.Bool
			)
			unblock := make(chan struct{})
			t.Cleanup(func() { close(unblock) })
			election.PrependReactor("*", "leases", func(a ktesting.Action) (bool, runtime.Object, error) {
				if a.GetVerb() != "create" && a.GetVerb() != "update" {
					return false, nil, nil
				}
				if cut.Load() {
					<-unblock // hangs, as a request on a connection that drops every packet
					return true, nil, errors.New("connection cut")
				}
				mu.Lock()
				lastRenew = time.Now()
				mu.Unlock()
				return false, nil, nil // the tracker stores it
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- f.w.RunLeaderElected(ctx, election, le, 1) }()
			for deadline := time.Now().Add(10 * time.Second); !slices.Contains(f.journal.take(), "up refresh=false"); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the up never started")
				}
			}
			if sigterm {
				cancel() // the grace (a minute) runs while the up hangs
				time.Sleep(time.Second)
			}
			cut.Store(true)
			var killed time.Time
			for deadline := time.Now().Add(20 * time.Second); killed.IsZero(); time.Sleep(10 * time.Millisecond) {
				if slices.Contains(f.journal.take(), "kill") {
					killed = time.Now()
				}
				if time.Now().After(deadline) {
					t.Fatal("the pulumi processes were never killed after the renewals hung")
				}
			}
			mu.Lock()
			took := killed.Sub(lastRenew)
			mu.Unlock()
			t.Logf("last successful renewal to the kill: %s (renew deadline %s + kill after %s; another replica may lead after %s)",
				took.Round(time.Millisecond), le.RenewDeadline, fence.KillAfter, le.LeaseDuration)
			if limit := le.RenewDeadline + fence.KillAfter + 300*time.Millisecond; took > limit || took >= le.LeaseDuration {
				t.Errorf("killed %s after the last renewal: want at most %s, before the lease duration %s", took, limit, le.LeaseDuration)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrLeadershipLost) {
					t.Errorf("RunLeaderElected = %v, want ErrLeadershipLost", err)
				}
			case <-time.After(le.LeaseDuration):
				t.Fatal("RunLeaderElected still runs a lease duration after the kill: it waits on the hung elector")
			}
			if err := f.w.Healthy(); err == nil && f.w.Leading() {
				t.Error("Healthy() = nil for a leader past its renew deadline")
			}
		})
	}
}

// TestUnitNoWriteAfterTheFence: once this replica's fence has expired (its Lease lost while an up
// ran), it writes nothing more to the API server: not the status that up would report (the new
// leader's Ready and observedGeneration stay), not a finalizer; the reconcile fails with
// fence.ErrFenced.
func TestUnitNoWriteAfterTheFence(t *testing.T) {
	f := newUnit(t, Options{})
	f.w.fence = fence.New(time.Minute)
	f.w.fence.Renewed(f.w.fence.Now())
	f.create(kch("web", nil, Finalizer))
	f.stacks.onUp = f.w.fence.Revoke // the Lease is lost while the up runs
	err := f.reconcile("web")
	if !errors.Is(err, fence.ErrFenced) {
		t.Errorf("reconcile = %v, want fence.ErrFenced", err)
	}
	if got := f.journal.take(); !slices.Equal(got, []string{statusProgressing, "up refresh=false"}) {
		t.Errorf("journal %q: want the status before the up, the up, and no write after", got)
	}
	f.create(kch("new", nil))
	if err := f.reconcile("new"); !errors.Is(err, fence.ErrFenced) {
		t.Errorf("reconcile of a new object = %v, want fence.ErrFenced", err)
	}
	if got := f.journal.take(); len(got) != 0 {
		t.Errorf("journal %q: want no finalizer and no status written", got)
	}
}

// TestUnitSIGTERMIsNotLeadershipLoss: a leader stopped by its context (SIGTERM) once its work is
// done returns nil, not ErrLeadershipLost (which exits 1 and logs a lost Lease). Releasing the
// Lease ends the elector's leading context, which revokes the fence; that revocation, after the
// watcher has stopped, must not be taken for a lost Lease. The two happen on goroutines of their
// own, so the test runs many shutdowns, on one P (GOMAXPROCS 1), where their order varies most.
func TestUnitSIGTERMIsNotLeadershipLoss(t *testing.T) {
	defer goruntime.GOMAXPROCS(goruntime.GOMAXPROCS(1))
	for i := range 100 {
		le := LeaderElection{Namespace: "ops", Name: "lease", LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
		f := newUnit(t, Options{ShutdownGrace: time.Second})
		if err := f.dyn.Tracker().Add(kch("web", nil)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- f.w.RunLeaderElected(ctx, kubefake.NewClientset(), le, 1) }()
		// The up of "web" runs once the leader's caches have synced and its workers run.
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(f.journal.take(), "up refresh=false"); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("shutdown %d: the up never started", i)
			}
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("shutdown %d: RunLeaderElected after SIGTERM = %v, want nil", i, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("shutdown %d: RunLeaderElected still runs 10 s after SIGTERM", i)
		}
	}
}

// TestUnitLeaseReleasedAfterProcessesEnd: on SIGTERM the leader releases its Lease only once
// every pulumi process of it has ended (Stacks.Stop returned), not when its workers' operations
// have returned: the engine host outlives those, and the replica that takes a released Lease
// starts on the stacks at once. Stop is held up here to see the Lease still held meanwhile.
func TestUnitLeaseReleasedAfterProcessesEnd(t *testing.T) {
	le := LeaderElection{Namespace: "ops", Name: "lease", Identity: "replica-a", LeaseDuration: 6 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	f := newUnit(t, Options{ShutdownGrace: time.Second})
	if err := f.dyn.Tracker().Add(kch("web", nil)); err != nil {
		t.Fatal(err)
	}
	stopping, ended := make(chan struct{}), make(chan struct{})
	f.stacks.onStop = func() {
		close(stopping)
		<-ended
	}
	kube := kubefake.NewClientset()
	holder := func() string {
		l, err := kube.CoordinationV1().Leases("ops").Get(context.Background(), "lease", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read the Lease: %v", err)
		}
		return *l.Spec.HolderIdentity
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.w.RunLeaderElected(ctx, kube, le, 1) }()
	for deadline := time.Now().Add(10 * time.Second); !slices.Contains(f.journal.take(), "up refresh=false"); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the up never started")
		}
	}
	cancel()
	select {
	case <-stopping:
	case <-time.After(10 * time.Second):
		t.Fatal("the pulumi processes were never stopped after SIGTERM")
	}
	time.Sleep(2 * le.RetryPeriod) // room for a release that would not wait
	if h := holder(); h != "replica-a" {
		t.Fatalf("the Lease is held by %q while this replica's pulumi processes are still ending, want replica-a's", h)
	}
	close(ended)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunLeaderElected after SIGTERM = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunLeaderElected still runs 10 s after the processes ended")
	}
	if h := holder(); h != "" {
		t.Errorf("the Lease is held by %q after a clean stop, want it released", h)
	}
}

// A watcher stopped (SIGTERM) before its informer caches synced has started nothing: its run
// ends cleanly (the process exits 0, as after any shutdown). One whose Lease is lost before they
// synced still reports it.
func TestUnitStopBeforeSyncIsClean(t *testing.T) {
	f := newUnit(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.w.run(ctx, nil, 1); err != nil {
		t.Errorf("run stopped before its caches synced: %v, want nil (a clean stop)", err)
	}
	g := newUnit(t, Options{})
	lost := make(chan struct{})
	close(lost)
	if err := g.w.run(context.Background(), lost, 1); err == nil || !strings.Contains(err.Error(), "Lease was lost") {
		t.Errorf("run whose Lease was lost before its caches synced: %v, want the loss reported", err)
	}
}
