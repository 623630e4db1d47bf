package watcher

import (
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// ownedFirst is the storage of the watcher's workqueue (client-go's workqueue.Queue, which the
// queue calls under its own lock): two FIFO lanes. Keys marked by markOwned (a change to one
// of the object's Deployment, Service or ConfigMap: a rollout that finished or failed, drift)
// go to the first lane; every other key (a create, a change, a resync, a retry) to the second.
// Pop empties the first lane before it takes from the second.
//
// Hand-written because client-go's workqueue is one FIFO with no priority; controller-runtime's
// priority queue has one but brings controller-runtime in for one type. With one FIFO, in a
// burst of thousands of new objects, an object whose Deployment had become available waited
// behind every create still queued before its reconcile could mark it Ready: its Ready time
// was the whole burst's. The first lane's reconciles are cheap (the stack is up to date; they
// read the owned objects from the informers' caches and write the status), so the creates
// behind them wait little longer.
type ownedFirst struct {
	mu sync.Mutex // guards marked: markOwned runs in informer handlers, outside the queue's lock
	// marked holds the keys whose next Push or Touch goes to the first lane.
	marked      map[cache.ObjectName]struct{}
	first, rest []cache.ObjectName
}

var _ workqueue.Queue[cache.ObjectName] = (*ownedFirst)(nil)

func newOwnedFirst() *ownedFirst {
	return &ownedFirst{marked: map[cache.ObjectName]struct{}{}}
}

// markOwned makes key's next Push (or Touch, if it is queued already) go to the first lane.
// Call it before the queue's Add: a key being processed is pushed when its worker is done.
func (q *ownedFirst) markOwned(key cache.ObjectName) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.marked[key] = struct{}{}
}

// take reports whether key was marked, and unmarks it.
func (q *ownedFirst) take(key cache.ObjectName) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := q.marked[key]
	delete(q.marked, key)
	return ok
}

// Touch moves a queued key to the end of the first lane if it was marked since it was pushed.
func (q *ownedFirst) Touch(key cache.ObjectName) {
	if !q.take(key) {
		return
	}
	for i, k := range q.rest {
		if k == key {
			q.rest = append(q.rest[:i], q.rest[i+1:]...)
			q.first = append(q.first, key)
			return
		}
	}
	// Already in the first lane.
}

// Push queues a key the queue does not hold: in the first lane if it was marked.
func (q *ownedFirst) Push(key cache.ObjectName) {
	if q.take(key) {
		q.first = append(q.first, key)
		return
	}
	q.rest = append(q.rest, key)
}

// Len is the number of keys in both lanes.
func (q *ownedFirst) Len() int { return len(q.first) + len(q.rest) }

// Pop takes the oldest key of the first lane, else of the second. The workqueue calls it only
// when Len is not 0.
func (q *ownedFirst) Pop() cache.ObjectName {
	lane := &q.rest
	if len(q.first) > 0 {
		lane = &q.first
	}
	key := (*lane)[0]
	(*lane)[0] = cache.ObjectName{} // as workqueue's DefaultQueue: no reference kept
	*lane = (*lane)[1:]
	return key
}

// newQueue is the watcher's workqueue: client-go's rate-limiting queue (metrics under name,
// backoff by limiter) over lanes.
func newQueue(name string, limiter workqueue.TypedRateLimiter[cache.ObjectName], metrics workqueue.MetricsProvider, lanes *ownedFirst) workqueue.TypedRateLimitingInterface[cache.ObjectName] {
	fifo := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, Queue: lanes})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, Queue: fifo})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: name, MetricsProvider: metrics, DelayingQueue: delaying})
}
