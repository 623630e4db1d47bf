package watcher

import (
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// metrics are the watcher's Prometheus metrics, all prefixed pulumi_operator_.
type metrics struct {
	reconciles *prometheus.CounterVec
	reconcile  prometheus.Histogram
	operations *prometheus.HistogramVec
	managed    prometheus.GaugeFunc
	failingG   prometheus.GaugeFunc
	lockedG    prometheus.GaugeFunc
	blockedG   prometheus.GaugeFunc
	conditions *prometheus.GaugeVec
	workqueue  workqueue.MetricsProvider

	mu       sync.Mutex
	stacks   map[cache.ObjectName]bool // key -> failing
	failing  int
	locked   map[cache.ObjectName]bool                      // keys waiting for a lock nobody may remove
	blocked  map[cache.ObjectName]bool                      // keys whose delete is blocked (waitTerminating)
	outdated map[cache.ObjectName]bool                      // keys whose stack holds an older program version
	statuses map[cache.ObjectName][4]metav1.ConditionStatus // key -> conditionTypes' statuses in the condition series
}

// Bucket bounds in seconds: a reconcile that skips Pulumi takes milliseconds, an up a second
// to minutes.
var durationBuckets = []float64{0.005, 0.025, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{stacks: map[cache.ObjectName]bool{}, statuses: map[cache.ObjectName][4]metav1.ConditionStatus{},
		locked: map[cache.ObjectName]bool{}, blocked: map[cache.ObjectName]bool{}, outdated: map[cache.ObjectName]bool{}}
	m.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pulumi_operator_reconciles_total", Help: "Reconciles by result: success, error or locked.",
	}, []string{"result"})
	m.reconcile = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pulumi_operator_reconcile_duration_seconds", Help: "Time of one reconcile, Pulumi runs included.",
		Buckets: durationBuckets,
	})
	m.operations = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "pulumi_operator_pulumi_operation_duration_seconds", Help: "Time of Pulumi operations by operation (up, destroy) and result.",
		Buckets: durationBuckets,
	}, []string{"operation", "result"})
	m.managed = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_stacks_managed", Help: "KindCustomHttp objects (one stack each) this process reconciles.",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(len(m.stacks)) })
	m.failingG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_stacks_failing", Help: "Stacks whose last reconcile failed or whose spec is invalid.",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(m.failing) })
	m.lockedG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_stacks_locked", Help: "Stacks whose last operation waits for a lock held by another update (a laptop, CI, another operator), which the operator does not remove.",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(len(m.locked)) })
	m.blockedG = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_deletes_blocked", Help: "KindCustomHttp objects being deleted whose stack is destroyed but whose deleted objects have not gone for longer than the operator waits in silence (something holds them: a finalizer, a pod that does not stop); status Ready names them.",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(len(m.blocked)) })
	m.conditions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pulumi_operator_condition",
		Help: "The conditions of each KindCustomHttp (Ready, Reconciling, Stalled, ReferencesChecked): one series per condition, at its current status (True, False, Unknown), of value 1.",
	}, []string{"namespace", "name", "type", "status"})
	m.workqueue = newWorkqueueMetrics(reg)
	if reg != nil {
		reg.MustRegister(m.reconciles, m.reconcile, m.operations, m.managed, m.failingG, m.lockedG, m.blockedG, m.conditions)
	}
	return m
}

func (m *metrics) observeReconcile(err error, d time.Duration) {
	result := "success"
	switch {
	case errors.Is(err, errRolloutInProgress), errors.Is(err, errObjectsTerminating):
		// The reconcile did its part; the Deployment's rollout goes on.
	case errors.Is(err, stack.ErrLocked):
		result = "locked"
	case err != nil:
		result = "error"
	}
	m.reconciles.WithLabelValues(result).Inc()
	m.reconcile.Observe(d.Seconds())
}

// track counts key in pulumi_operator_stacks_managed: the object exists. Only reconcile calls it,
// for an object it found, and forget undoes it; observeReconcile, which runs after the reconcile
// of a deleted object too, does not, or the gauge would never go down.
func (m *metrics) track(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.stacks[key]; !ok {
		m.stacks[key] = false
	}
}

func (m *metrics) observeOperation(op string, err error, res stack.Result) {
	if res.Start.IsZero() || res.End.IsZero() {
		return
	}
	result := "succeeded"
	if err != nil {
		result = "failed"
	}
	m.operations.WithLabelValues(op, result).Observe(res.End.Sub(res.Start).Seconds())
}

func (m *metrics) setFailing(key cache.ObjectName, failing bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if was := m.stacks[key]; was != failing {
		if failing {
			m.failing++
		} else {
			m.failing--
		}
	}
	m.stacks[key] = failing
}

// setLocked records whether key waits for a lock nobody may remove.
func (m *metrics) setLocked(key cache.ObjectName, locked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if locked {
		m.locked[key] = true
	} else {
		delete(m.locked, key)
	}
}

// setDeleteBlocked records whether key's delete is blocked by objects that do not go.
func (m *metrics) setDeleteBlocked(key cache.ObjectName, blocked bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if blocked {
		m.blocked[key] = true
	} else {
		delete(m.blocked, key)
	}
}

// setOutdated records whether key's stack holds an older program version than this operator's
// (its last reconcile found an up whose only cause is the program version, not yet run).
func (m *metrics) setOutdated(key cache.ObjectName, outdated bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if outdated {
		m.outdated[key] = true
	} else {
		delete(m.outdated, key)
	}
}

// registerUpgrades registers the gauges of the program upgrades: the stacks on an older program
// version, and those of them waiting for their turn in u.
func (m *metrics) registerUpgrades(reg prometheus.Registerer, u *programUpgrades) {
	if reg == nil {
		return
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_stacks_program_outdated",
		Help: "Stacks that hold an older program version than this operator's: their next up (paced, --program-upgrades-per-minute) brings them to it.",
	}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(len(m.outdated)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "pulumi_operator_program_upgrades_waiting",
			Help: "Stacks whose program upgrade waits for its turn (--program-upgrades-per-minute).",
		}, func() float64 { return float64(u.pending()) }))
}

// conditionTypes are the condition types pulumi_operator_condition has series for (ReferencesChecked
// only on objects whose spec.envFrom names something).
var conditionTypes = []string{api.ConditionReady, api.ConditionReconciling, api.ConditionStalled, api.ConditionReferencesChecked}

// setConditions makes key's pulumi_operator_condition series show conds: for each type, one
// series, at its current status, of value 1 (absent for a type conds lacks). Flux's
// gotk_reconcile_condition also keeps the other statuses at 0; those are left out here, since
// they would triple the series (9 per object instead of 3; their memory is in docs/benchmarks.md) and
// `== 1` queries need only the current one. It does nothing when key's statuses are those it
// last set, as on every idle resync.
func (m *metrics) setConditions(key cache.ObjectName, conds []metav1.Condition) {
	var now [4]metav1.ConditionStatus
	for i, typ := range conditionTypes {
		if c := meta.FindStatusCondition(conds, typ); c != nil {
			now[i] = c.Status
		}
	}
	m.mu.Lock()
	was, seen := m.statuses[key]
	m.statuses[key] = now
	m.mu.Unlock()
	if seen && was == now {
		return
	}
	for i, typ := range conditionTypes {
		if seen && was[i] == now[i] {
			continue
		}
		if seen && was[i] != "" {
			m.conditions.DeleteLabelValues(key.Namespace, key.Name, typ, string(was[i]))
		}
		if now[i] != "" {
			m.conditions.WithLabelValues(key.Namespace, key.Name, typ, string(now[i])).Set(1)
		}
	}
}

func (m *metrics) forget(key cache.ObjectName) {
	m.conditions.DeletePartialMatch(prometheus.Labels{"namespace": key.Namespace, "name": key.Name})
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.statuses, key)
	delete(m.locked, key)
	delete(m.blocked, key)
	delete(m.outdated, key)
	if m.stacks[key] {
		m.failing--
	}
	delete(m.stacks, key)
}

// workqueueMetrics adapts client-go's workqueue.MetricsProvider to Prometheus. client-go
// ships only the interface; controller-runtime's adapter would pull in controller-runtime for
// thirty lines, so they are written here, with controller-runtime's metric names
// (workqueue_depth, workqueue_adds_total, ...) that dashboards already know.
type workqueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newWorkqueueMetrics(reg prometheus.Registerer) *workqueueMetrics {
	l := []string{"name"}
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 12)
	w := &workqueueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of workqueue."}, l),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, l),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, l),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Total adds handled by workqueue."}, l),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Total retries handled by workqueue."}, l),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Seconds an item stays in workqueue before being requested.", Buckets: buckets}, l),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Seconds processing an item from workqueue takes.", Buckets: buckets}, l),
	}
	if reg != nil {
		reg.MustRegister(w.depth, w.unfinished, w.longest, w.adds, w.retries, w.latency, w.work)
	}
	return w
}

func (w *workqueueMetrics) NewDepthMetric(n string) workqueue.GaugeMetric {
	return w.depth.WithLabelValues(n)
}
func (w *workqueueMetrics) NewAddsMetric(n string) workqueue.CounterMetric {
	return w.adds.WithLabelValues(n)
}
func (w *workqueueMetrics) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return w.latency.WithLabelValues(n)
}
func (w *workqueueMetrics) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return w.work.WithLabelValues(n)
}
func (w *workqueueMetrics) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return w.unfinished.WithLabelValues(n)
}
func (w *workqueueMetrics) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return w.longest.WithLabelValues(n)
}
func (w *workqueueMetrics) NewRetriesMetric(n string) workqueue.CounterMetric {
	return w.retries.WithLabelValues(n)
}
