package watcher

import (
	"slices"
	"testing"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// TestOwnedFirstOrder drives client-go's rate-limiting queue over ownedFirst and checks the
// order in which workers get the keys.
func TestOwnedFirstOrder(t *testing.T) {
	k := func(n string) cache.ObjectName { return cache.ObjectName{Namespace: "ns", Name: n} }
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lanes := newOwnedFirst()
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
				got = append(got, key.Name)
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
