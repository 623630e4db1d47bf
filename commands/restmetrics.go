package commands

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// The Kubernetes API request metrics of this process, rest_client_requests_total{code,method,
// host} and rest_client_request_duration_seconds{verb,host}: the names controller-runtime and
// the Kubernetes components use. client-go defines only the hooks (tools/metrics) and takes
// them once per process, so the collectors are process-wide too (hookRESTClient) and every
// `watch` registry shows them. The adapters are written here rather than importing
// controller-runtime for them.
var (
	restRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Kubernetes API requests, by status code, method and host.",
	}, []string{"code", "method", "host"})
	restLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Kubernetes API request latency in seconds, by verb and host.",
		Buckets: []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60},
	}, []string{"verb", "host"})
	hookRESTClient sync.Once
)

// registerRESTClientMetrics hooks client-go's request metrics (once per process) and adds
// them to reg.
func registerRESTClientMetrics(reg prometheus.Registerer) {
	hookRESTClient.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:  requestResult{restRequests},
			RequestLatency: requestLatency{restLatency},
		})
	})
	reg.MustRegister(restRequests, restLatency)
}

type requestResult struct{ c *prometheus.CounterVec }

func (r requestResult) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}

type requestLatency struct{ h *prometheus.HistogramVec }

func (r requestLatency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	r.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}
