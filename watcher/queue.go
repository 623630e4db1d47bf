package watcher

import (
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// fairLanes is the storage of the watcher's workqueue (client-go's workqueue.Queue, which the
// queue calls under its own lock): two lanes, each fair across namespaces.
//
//   - The fast lane holds keys marked by markOwned (a change of one of the object's Deployment,
//     Service or ConfigMap: a rollout that finished or failed, or drift), so that an object's
//     Ready does not wait behind a burst of creates. It is only for reconciles that run no up:
//     one taken from it that finds an up to run puts the key in the slow lane instead
//     (Watcher.reconcile, tookFast), so that owned-object events, which anyone who may scale a
//     Deployment can cause, never buy an up ahead of the others.
//   - The slow lane holds every other key: creates, changes, deletes, resyncs, retries, and the
//     ups the fast lane sent on.
//
// Within a lane, each namespace has its own FIFO, and Pop takes from the namespaces in turn
// (round robin), so one namespace's thousand queued keys delay another namespace's one key by
// at most one key of each other namespace, not by the thousand: the shape of Kubernetes' API
// Priority and Fairness (fair queuing, a queue per flow), without its shuffle sharding, which a
// controller with a few workers does not need. The fast lane goes first, but not for ever
// (aging): after maxFastRun fast keys in a row, or once the oldest slow key has waited
// maxSlowWait, a slow key is taken.
//
// Hand-written because client-go's workqueue is one FIFO with no priority and no fairness;
// controller-runtime's priority queue has priorities but no fairness, and would bring
// controller-runtime in for one type. The workqueue's own guarantees (a key queued once, never
// processed by two workers at once, backoff) are client-go's: this type only orders.
type fairLanes struct {
	mu sync.Mutex // guards marked and fast: markOwned runs in informer handlers, outside the queue's lock
	// marked holds the keys whose next Push or Touch goes to the fast lane.
	marked map[cache.ObjectName]struct{}
	// fast holds the keys the last Pop took from the fast lane (tookFast).
	fast map[cache.ObjectName]struct{}

	fastLane, slowLane fairLane
	// fastRun counts the fast keys taken in a row.
	fastRun int
	now     func() time.Time
}

// maxFastRun and maxSlowWait bound how long the fast lane may hold the slow one back: its keys
// are cheap (no up), so a run of 16 costs milliseconds; a second is far less than an up of the
// slow lane takes.
const (
	maxFastRun  = 16
	maxSlowWait = time.Second
)

var _ workqueue.Queue[cache.ObjectName] = (*fairLanes)(nil)

func newFairLanes() *fairLanes {
	return &fairLanes{marked: map[cache.ObjectName]struct{}{}, fast: map[cache.ObjectName]struct{}{}, now: time.Now}
}

// markOwned makes key's next Push (or Touch, if it is queued already) go to the fast lane.
// Call it before the queue's Add: a key being processed is pushed when its worker is done.
func (q *fairLanes) markOwned(key cache.ObjectName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.marked[key] = struct{}{}
}

// take reports whether key was marked, and unmarks it.
func (q *fairLanes) take(key cache.ObjectName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.marked[key]
	delete(q.marked, key)
	return ok
}

// tookFast reports whether the worker processing key got it from the fast lane, and forgets it.
func (q *fairLanes) tookFast(key cache.ObjectName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.fast[key]
	delete(q.fast, key)
	return ok
}

// Touch moves a queued key to the fast lane if it was marked since it was pushed.
func (q *fairLanes) Touch(key cache.ObjectName) {
	if !q.take(key) {
		return
	}
	if at, ok := q.slowLane.remove(key); ok {
		q.fastLane.push(key, at)
	}
	// Already in the fast lane.
}

// Push queues a key the queue does not hold: in the fast lane if it was marked.
func (q *fairLanes) Push(key cache.ObjectName) {
	if q.take(key) {
		q.fastLane.push(key, q.now())
		return
	}
	q.slowLane.push(key, q.now())
}

// Len is the number of keys in both lanes.
func (q *fairLanes) Len() int { return q.fastLane.n + q.slowLane.n }

// Pop takes the next key (see fairLanes). The workqueue calls it only when Len is not 0.
func (q *fairLanes) Pop() cache.ObjectName {
	slowDue := q.slowLane.n > 0 && (q.fastRun >= maxFastRun || q.now().Sub(q.slowLane.oldest()) >= maxSlowWait)
	if q.fastLane.n > 0 && !slowDue {
		q.fastRun++
		key := q.fastLane.pop()
		q.mu.Lock()
		q.fast[key] = struct{}{}
		q.mu.Unlock()
		return key
	}
	q.fastRun = 0
	key := q.slowLane.pop()
	q.mu.Lock()
	delete(q.fast, key)
	q.mu.Unlock()
	return key
}

// fairLane is one lane: a FIFO per namespace, taken from in turn.
type fairLane struct {
	byNS map[string][]queued
	// ring lists the namespaces with queued keys, in the order they are taken from.
	ring []string
	n    int
}

// queued is a key and when it was queued.
type queued struct {
	key cache.ObjectName
	at  time.Time
}

func (l *fairLane) push(key cache.ObjectName, at time.Time) {
	if l.byNS == nil {
		l.byNS = map[string][]queued{}
	}
	if len(l.byNS[key.Namespace]) == 0 {
		l.ring = append(l.ring, key.Namespace)
	}
	l.byNS[key.Namespace] = append(l.byNS[key.Namespace], queued{key, at})
	l.n++
}

// pop takes the oldest key of the next namespace in turn, which then goes to the end of the turn.
func (l *fairLane) pop() cache.ObjectName {
	ns := l.ring[0]
	l.ring[0] = ""
	l.ring = l.ring[1:]
	fifo := l.byNS[ns]
	key := fifo[0].key
	fifo[0] = queued{} // as workqueue's DefaultQueue: no reference kept
	if fifo = fifo[1:]; len(fifo) > 0 {
		l.byNS[ns] = fifo
		l.ring = append(l.ring, ns)
	} else {
		delete(l.byNS, ns)
	}
	l.n--
	return key
}

// remove takes key out of the lane wherever it is, and says when it was queued.
func (l *fairLane) remove(key cache.ObjectName) (time.Time, bool) {
	fifo := l.byNS[key.Namespace]
	for i, e := range fifo {
		if e.key != key {
			continue
		}
		fifo = append(fifo[:i], fifo[i+1:]...)
		l.n--
		if len(fifo) > 0 {
			l.byNS[key.Namespace] = fifo
			return e.at, true
		}
		delete(l.byNS, key.Namespace)
		for j, ns := range l.ring {
			if ns == key.Namespace {
				l.ring = append(l.ring[:j], l.ring[j+1:]...)
				break
			}
		}
		return e.at, true
	}
	return time.Time{}, false
}

// oldest is when the longest-waiting key of the lane was queued (a namespace's oldest is its
// FIFO's head); the zero time when the lane is empty.
func (l *fairLane) oldest() time.Time {
	var t time.Time
	for _, ns := range l.ring {
		if at := l.byNS[ns][0].at; t.IsZero() || at.Before(t) {
			t = at
		}
	}
	return t
}

// newQueue is the watcher's workqueue: client-go's rate-limiting queue (metrics under name,
// backoff by limiter) over lanes.
func newQueue(name string, limiter workqueue.TypedRateLimiter[cache.ObjectName], metrics workqueue.MetricsProvider, lanes *fairLanes) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, Queue: lanes})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, Queue: fifo})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, DelayingQueue: delaying})
}

// namespaceSlots counts the ups running per namespace and parks the objects that wait for one.
// A parked object is queued again when an up of its namespace ends, not polled: polling would
// spend a worker and API requests on every waiting object of a busy namespace, every period.
type namespaceSlots struct {
	mu      sync.Mutex
	n       map[string]int
	waiting map[string][]cache.ObjectName // per namespace, in the order parked, no duplicates
}

// acquire takes one of max slots of key's namespace (max 0: no limit) and reports whether it
// could; when it could not, key is parked until the next release of that namespace.
func (s *namespaceSlots) acquire(key cache.ObjectName, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == nil {
		s.n, s.waiting = map[string]int{}, map[string][]cache.ObjectName{}
	}
	ns := key.Namespace
	if max > 0 && s.n[ns] >= max {
		if !slices.Contains(s.waiting[ns], key) {
			s.waiting[ns] = append(s.waiting[ns], key)
		}
		return false
	}
	s.n[ns]++
	return true
}

// release gives back a slot of namespace ns and returns the objects parked for one, no longer
// parked: the caller queues them again (each takes a slot or parks anew).
func (s *namespaceSlots) release(ns string) []cache.ObjectName {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[ns]--; s.n[ns] <= 0 {
		delete(s.n, ns)
	}
	parked := s.waiting[ns]
	delete(s.waiting, ns)
	return parked
}
