package watcher

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/pulumi-operator/pulumi-operator/infra"
)

// olderProgram makes name's stored status read as written by an up of program version old:
// its applied digest is the digest of the same spec under old (as an operator whose program
// was old wrote it), and appliedProgramVersion is old ("" for a status from before the field).
// The watcher forgets what it remembers of the object, as a new operator process starts
// without that memory.
func olderProgram(t *testing.T, f *unitFixture, name, old string, withVersion bool) {
	t.Helper()
	key := cache.ObjectName{Namespace: unitNS, Name: name}
	r, stackName, err := f.w.desired(context.Background(), f.w.object(key, f.stored(name)))
	if err != nil {
		t.Fatal(err)
	}
	f.change(name, true, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, f.w.digestAt(r.Desired, stackName, old), "status", "appliedDigest")
		if withVersion {
			_ = unstructured.SetNestedField(u.Object, old, "status", "appliedProgramVersion")
		} else {
			unstructured.RemoveNestedField(u.Object, "status", "appliedProgramVersion")
		}
	})
	f.w.objects.forget(key)
}

// TestUnitProgramUpgradePaced: a stack whose only difference from its object is an older
// program version runs no up until its turn is granted (programUpgrades); it is counted in
// pulumi_operator_stacks_program_outdated and _program_upgrades_waiting meanwhile, its up then
// runs with the Event reason ProgramUpgraded, and status records the program version. A status
// from before appliedProgramVersion existed is recognised too (the earlier versions are tried).
func TestUnitProgramUpgradePaced(t *testing.T) {
	if infra.ProgramVersion == "1" {
		t.Fatal("infra.ProgramVersion is 1: no earlier program version to upgrade from")
	}
	for name, withVersion := range map[string]bool{"with appliedProgramVersion": true, "status from before the field": false} {
		t.Run(name, func(t *testing.T) {
			f := newUnit(t, Options{ProgramUpgradesPerMinute: 60})
			f.applied(kch("web", nil, Finalizer))
			olderProgram(t, f, "web", "1", withVersion)

			if err := f.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.journal.take(); ranUp(got) {
				t.Fatalf("a program upgrade ran before its turn: %q", got)
			}
			if got := gauge(t, f.registry, "pulumi_operator_stacks_program_outdated"); got != 1 {
				t.Errorf("stacks_program_outdated %v, want 1", got)
			}
			if got := gauge(t, f.registry, "pulumi_operator_program_upgrades_waiting"); got != 1 {
				t.Errorf("program_upgrades_waiting %v, want 1", got)
			}
			// A second look before the turn neither runs it nor queues it twice.
			if err := f.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.journal.take(); ranUp(got) {
				t.Fatalf("a program upgrade ran before its turn: %q", got)
			}
			if n := f.w.upgrades.pending(); n != 1 {
				t.Fatalf("%d waiting after two looks, want 1", n)
			}

			if key, ok := f.w.upgrades.next(); !ok || key.Name != "web" {
				t.Fatalf("next = %v, %v; want web", key, ok)
			}
			if err := f.reconcile("web"); err != nil {
				t.Fatal(err)
			}
			if got := f.journal.take(); !slices.Contains(got, "up refresh=false background") {
				t.Fatalf("after its turn: %q, want the up", got)
			}
			if ev := f.events(); !slices.Contains(ev, "Normal "+ReasonProgramUpgraded) {
				t.Errorf("Events %q, want Normal %s", ev, ReasonProgramUpgraded)
			}
			if got := f.storedCR("web").Status.AppliedProgramVersion; got != infra.ProgramVersion {
				t.Errorf("status.appliedProgramVersion %q, want %q", got, infra.ProgramVersion)
			}
			if got := gauge(t, f.registry, "pulumi_operator_stacks_program_outdated"); got != 0 {
				t.Errorf("stacks_program_outdated %v after the up, want 0", got)
			}
		})
	}
}

// TestUnitProgramUpgradeNotForOtherChanges: a spec change made together with a program upgrade,
// and an object never applied, are not held back by the program-upgrade pace; a program
// upgrade waiting for its turn is dropped from the wait once a spec change runs the up anyway.
func TestUnitProgramUpgradeNotForOtherChanges(t *testing.T) {
	f := newUnit(t, Options{ProgramUpgradesPerMinute: 60})
	f.create(kch("new", nil, Finalizer))
	if err := f.reconcile("new"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Contains(got, "up refresh=false") {
		t.Fatalf("a new object: %q, want its up at once", got)
	}

	f.applied(kch("web", nil, Finalizer))
	olderProgram(t, f, "web", "1", true)
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if n := f.w.upgrades.pending(); n != 1 {
		t.Fatalf("%d waiting, want 1", n)
	}
	f.change("web", false, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicaCount")
		u.SetGeneration(u.GetGeneration() + 1)
	})
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	if got := f.journal.take(); !slices.Contains(got, "up refresh=false") {
		t.Fatalf("a spec change of a stack on an older program: %q, want its up at once", got)
	}
	if ev := f.events(); slices.Contains(ev, "Normal "+ReasonProgramUpgraded) {
		t.Errorf("Events %q: a spec change reported as a program upgrade", ev)
	}
	if n := f.w.upgrades.pending(); n != 0 {
		t.Errorf("%d still waiting after the up, want 0", n)
	}
}

// TestProgramUpgradesPace: programUpgrades.run grants the waiting keys in arrival order, no
// faster than its rate, and each only once the queue is idle or maxUpgradeDefer has passed.
// Only lower bounds on time are asserted: a slow machine may grant later, never sooner.
func TestProgramUpgradesPace(t *testing.T) {
	u := newProgramUpgrades(120) // one every 0.5 s
	u.setWorkers(4)              // room for the three granted keys: none is admitted until the end
	keys := []cache.ObjectName{{Namespace: "a", Name: "1"}, {Namespace: "b", Name: "2"}, {Namespace: "a", Name: "3"}}
	for _, k := range keys {
		if u.admit(k) {
			t.Fatalf("%v admitted before its turn", k)
		}
	}
	var mu sync.Mutex
	var got []cache.ObjectName
	var at []time.Time
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var idle sync.Mutex
	busy := true
	start := time.Now()
	go u.run(ctx, func() bool { idle.Lock(); defer idle.Unlock(); return !busy }, func(k cache.ObjectName) {
		mu.Lock()
		defer mu.Unlock()
		got, at = append(got, k), append(at, time.Now())
	})
	// The queue stays busy: the first grant waits maxUpgradeDefer for it.
	time.Sleep(maxUpgradeDefer / 2)
	mu.Lock()
	early := len(got)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("a key was granted while the queue was busy, before maxUpgradeDefer: %v", got)
	}
	idle.Lock()
	busy = false
	idle.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == len(keys) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, keys) {
		t.Fatalf("granted %v, want %v in arrival order", got, keys)
	}
	if d := at[0].Sub(start); d < maxUpgradeDefer/2 {
		t.Errorf("the first grant came %v after the start while the queue was busy", d)
	}
	if d := at[2].Sub(at[0]); d < 900*time.Millisecond {
		t.Errorf("three grants within %v at 2 a second", d)
	}
	for _, k := range keys {
		if !u.admit(k) {
			t.Errorf("%v granted but not admitted", k)
		}
		if u.admit(k) {
			t.Errorf("%v admitted twice on one grant", k)
		}
	}
}

// TestProgramUpgradesForget: a key forgotten while it waits (its object deleted, or an up that
// ran for another cause) is not granted; unpaced upgrades are always admitted.
func TestProgramUpgradesForget(t *testing.T) {
	u := newProgramUpgrades(60)
	a, b := cache.ObjectName{Namespace: "n", Name: "a"}, cache.ObjectName{Namespace: "n", Name: "b"}
	u.admit(a)
	u.admit(b)
	u.forget(a)
	if k, ok := u.next(); !ok || k != b {
		t.Fatalf("next = %v, %v; want %v (a was forgotten)", k, ok, b)
	}
	if k, ok := u.next(); ok {
		t.Fatalf("next = %v after the last, want none", k)
	}
	if unpaced := newProgramUpgrades(-1); !unpaced.admit(a) || unpaced.pending() != 0 {
		t.Error("an unpaced upgrade was held back")
	}
}

// TestProgramUpgradesLeaveAWorker: with 2 workers at most one program upgrade runs at a time, a
// grant not yet taken counting as running, so that the other worker is free for creates,
// changes, deletes and drift repairs; the next is granted once the running one is done. With one
// worker, one runs at a time too.
func TestProgramUpgradesLeaveAWorker(t *testing.T) {
	for _, workers := range []int{2, 1} {
		u := newProgramUpgrades(6000) // the pace is not what is tested
		u.setWorkers(workers)
		a, b := cache.ObjectName{Namespace: "n", Name: "a"}, cache.ObjectName{Namespace: "n", Name: "b"}
		u.admit(a)
		u.admit(b)
		ctx, cancel := context.WithCancel(context.Background())
		granted := make(chan cache.ObjectName, 2)
		go u.run(ctx, func() bool { return true }, func(k cache.ObjectName) { granted <- k })
		if k := <-granted; k != a {
			t.Fatalf("workers %d: first grant %v, want %v", workers, k, a)
		}
		select {
		case k := <-granted:
			t.Fatalf("workers %d: %v granted while %v's grant is not taken", workers, k, a)
		case <-time.After(300 * time.Millisecond):
		}
		if !u.admit(a) {
			t.Fatalf("workers %d: %v granted, not admitted", workers, a)
		}
		select {
		case k := <-granted:
			t.Fatalf("workers %d: %v granted while %v runs", workers, k, a)
		case <-time.After(300 * time.Millisecond):
		}
		u.done()
		select {
		case k := <-granted:
			if k != b {
				t.Fatalf("workers %d: second grant %v, want %v", workers, k, b)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("workers %d: %v not granted after %v was done", workers, b, a)
		}
		cancel()
	}
}

// A grant nobody took within grantHeld (its key's reconcile ended before it asked: an envFrom
// source missing, say) stops counting as a running upgrade, so it cannot stall the wave.
func TestProgramUpgradesStaleGrant(t *testing.T) {
	u := newProgramUpgrades(60)
	u.setWorkers(2)
	a := cache.ObjectName{Namespace: "n", Name: "a"}
	u.admit(a)
	if k, ok := u.next(); !ok || k != a {
		t.Fatalf("next = %v, %v", k, ok)
	}
	if u.roomToRun() {
		t.Fatal("room to run while a fresh grant is not taken")
	}
	u.mu.Lock()
	u.granted[a] = time.Now().Add(-grantHeld)
	u.mu.Unlock()
	if !u.roomToRun() {
		t.Fatal("a grant older than grantHeld still holds the room")
	}
}
