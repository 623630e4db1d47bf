package watcher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// TestFairLanesOrder drives client-go's rate-limiting queue over fairLanes and checks the order
// in which workers get the keys: the fast lane first, each lane fair across namespaces ("b/x" is
// key x of namespace b; a bare name is namespace ns's).
func TestFairLanesOrder(t *testing.T) {
	k := func(n string) cache.ObjectName {
		if ns, name, ok := strings.Cut(n, "/"); ok {
			return cache.ObjectName{Namespace: ns, Name: name}
		}
		return cache.ObjectName{Namespace: "ns", Name: n}
	}
	name := func(key cache.ObjectName) string {
		if key.Namespace == "ns" {
			return key.Name
		}
		return key.Namespace + "/" + key.Name
	}
	type step struct {
		op  string // add, owned (markOwned then Add), get (then Done), hold (Get without Done), done
		key string
	}
	tests := []struct {
		name  string
		steps []step
		want  []string // the keys Get returns after the steps, in order
	}{
		{name: "no mark is one FIFO",
			steps: []step{{"add", "a"}, {"add", "b"}, {"add", "c"}},
			want:  []string{"a", "b", "c"}},
		{name: "an owned change goes before queued creates",
			steps: []step{{"add", "a"}, {"add", "b"}, {"owned", "c"}},
			want:  []string{"c", "a", "b"}},
		{name: "owned changes keep their own order",
			steps: []step{{"add", "a"}, {"owned", "c"}, {"owned", "d"}},
			want:  []string{"c", "d", "a"}},
		{name: "a queued key marked later moves to the first lane",
			steps: []step{{"add", "a"}, {"add", "b"}, {"add", "c"}, {"owned", "c"}},
			want:  []string{"c", "a", "b"}},
		{name: "a key marked while processed is pushed first when done",
			steps: []step{{"add", "a"}, {"add", "b"}, {"hold", "a"}, {"add", "c"}, {"owned", "a"}, {"done", "a"}},
			want:  []string{"a", "b", "c"}},
		{name: "a key added while processed, unmarked, goes last",
			steps: []step{{"add", "a"}, {"add", "b"}, {"hold", "a"}, {"add", "a"}, {"done", "a"}},
			want:  []string{"b", "a"}},
		{name: "the mark is used once",
			steps: []step{{"owned", "a"}, {"add", "b"}, {"get", "a"}, {"add", "a"}},
			want:  []string{"b", "a"}},
		{name: "a key in the first lane stays once",
			steps: []step{{"owned", "a"}, {"owned", "a"}, {"add", "b"}},
			want:  []string{"a", "b"}},
		{name: "one namespace's many keys do not hold back another's one",
			steps: []step{{"add", "a"}, {"add", "b"}, {"add", "c"}, {"add", "d"}, {"add", "other/x"}},
			want:  []string{"a", "other/x", "b", "c", "d"}},
		{name: "namespaces take turns",
			steps: []step{{"add", "a"}, {"add", "b"}, {"add", "t/x"}, {"add", "t/y"}, {"add", "u/z"}},
			want:  []string{"a", "t/x", "u/z", "b", "t/y"}},
		{name: "the fast lane is fair too",
			steps: []step{{"owned", "a"}, {"owned", "b"}, {"owned", "c"}, {"owned", "other/x"}, {"add", "other/y"}},
			want:  []string{"a", "other/x", "b", "c", "other/y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lanes := newFairLanes()
			q := newQueue("", workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](), nil, lanes)
			defer q.ShutDown()
			for _, s := range tc.steps {
				switch s.op {
				case "add":
					q.Add(k(s.key))
				case "owned":
					lanes.markOwned(k(s.key))
					q.Add(k(s.key))
				case "get", "hold":
					got, _ := q.Get()
					if got != k(s.key) {
						t.Fatalf("step %v: Get = %v", s, got)
					}
					if s.op == "get" {
						q.Done(got)
					}
				case "done":
					q.Done(k(s.key))
				}
			}
			var got []string
			for q.Len() > 0 {
				key, _ := q.Get()
				got = append(got, name(key))
				q.Done(key)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("order = %v, want %v", got, tc.want)
			}
			if len(lanes.marked) != 0 {
				t.Errorf("marks left: %v", lanes.marked)
			}
		})
	}
}

// Aging: the fast lane goes first, but a slow key waits at most maxFastRun fast keys or
// maxSlowWait, however many fast keys keep coming (a namespace scaling its Deployments in a loop).
func TestFairLanesAging(t *testing.T) {
	now := time.Unix(1000, 0)
	q := newFairLanes()
	q.now = func() time.Time { return now }
	key := func(i int) cache.ObjectName {
		return cache.ObjectName{Namespace: "busy", Name: "d" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
	}
	q.Push(cache.ObjectName{Namespace: "quiet", Name: "new"})
	for i := range 100 {
		q.markOwned(key(i))
		q.Push(key(i))
	}
	for i := 0; ; i++ {
		got := q.Pop()
		if got.Namespace == "quiet" {
			if i != maxFastRun {
				t.Errorf("the slow key came after %d fast keys, want %d", i, maxFastRun)
			}
			break
		}
		if !q.tookFast(got) {
			t.Errorf("fast key %v not reported as taken from the fast lane", got)
		}
	}
	// By time: after maxSlowWait the slow key goes next.
	q = newFairLanes()
	q.now = func() time.Time { return now }
	q.Push(cache.ObjectName{Namespace: "quiet", Name: "new"})
	now = now.Add(maxSlowWait)
	q.markOwned(key(0))
	q.Push(key(0))
	if got := q.Pop(); got.Namespace != "quiet" || q.tookFast(got) {
		t.Errorf("after waiting %s the slow key was not next: got %v", maxSlowWait, got)
	}
}

// TestUnitFairShare: what keeps one tenant from taking the workers. A reconcile taken from the
// fast lane that finds an up to run (drift, which scaling one's own Deployment makes) runs none
// and queues the key in the slow lane; a second drift repair or requested refresh of one object
// within MinRefreshInterval waits for the rest of it (a spec change does not); an object whose
// namespace has MaxUpsPerNamespace ups running waits for a slot.
func TestUnitFairShare(t *testing.T) {
	key := cache.ObjectName{Namespace: unitNS, Name: "web"}
	request := func(f *unitFixture, v string) {
		f.deliver("web")
		f.change("web", false, func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{api.ReconcileRequestAnnotation: v})
		})
	}
	t.Run("fast lane runs no up", func(t *testing.T) {
		f := newUnit(t, Options{})
		f.applied(kch("web", nil))
		request(f, "r1")
		if err := f.w.reconcileFrom(context.Background(), key, true); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); len(got) != 0 {
			t.Errorf("fast-lane reconcile needing an up: %q, want nothing done", got)
		}
		if n := f.w.queue.Len(); n != 1 {
			t.Errorf("queue holds %d keys, want the key queued again (for the slow lane)", n)
		}
	})
	t.Run("refresh ups at most once per interval", func(t *testing.T) {
		f := newUnit(t, Options{MinRefreshInterval: time.Hour})
		f.applied(kch("web", nil))
		request(f, "r1")
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); !slices.Contains(got, "up refresh=true background") {
			t.Fatalf("first request: %q, want an up with refresh", got)
		}
		request(f, "r2")
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); len(got) != 0 {
			t.Errorf("second request within the interval: %q, want it held back", got)
		}
		f.change("web", false, func(u *unstructured.Unstructured) {
			_ = unstructured.SetNestedField(u.Object, int64(3), "spec", "replicaCount")
		})
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); !slices.Contains(got, "up refresh=false") {
			t.Errorf("a spec change within the interval: %q, want its up at once", got)
		}
		f.w.objects.update(key, func(s *objectState) { s.lastRefresh = time.Now().Add(-2 * time.Hour) })
		f.deliver("web")
		request(f, "r3")
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); !slices.Contains(got, "up refresh=true background") {
			t.Errorf("a request after the interval: %q, want its up", got)
		}
	})
	t.Run("namespace cap", func(t *testing.T) {
		f := newUnit(t, Options{MaxUpsPerNamespace: 1})
		f.create(kch("web", nil, Finalizer))
		other := cache.ObjectName{Namespace: unitNS, Name: "other"}
		f.w.nsUps.acquire(other, 1) // another object of the namespace is being updated
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); ranUp(got) {
			t.Errorf("an up over the namespace's cap: %q", got)
		}
		if err := f.reconcile("web"); err != nil { // a second look parks it once, not twice
			t.Fatal(err)
		}
		parked := f.w.nsUps.release(unitNS)
		if want := []cache.ObjectName{{Namespace: unitNS, Name: "web"}}; !slices.Equal(parked, want) {
			t.Fatalf("the release hands back %v, want %v to queue again", parked, want)
		}
		if again := f.w.nsUps.release(unitNS); len(again) != 0 {
			t.Errorf("a second release hands back %v again", again)
		}
		if err := f.reconcile("web"); err != nil {
			t.Fatal(err)
		}
		if got := f.journal.take(); !slices.Contains(got, "up refresh=false") {
			t.Errorf("with a slot free: %q, want the up", got)
		}
	})
}
