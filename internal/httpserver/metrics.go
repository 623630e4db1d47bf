package httpserver

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, following the Prometheus naming conventions (base units, _total for counters).
const (
	metricPings       = "http_server_peer_pings_total"
	metricPingSeconds = "http_server_peer_ping_duration_seconds"
	metricRounds      = "http_server_ping_rounds_total"
	metricPeers       = "http_server_peers"
	metricInvalid     = "http_server_peer_file_invalid_lines"
)

// Values of the "result" label of http_server_peer_pings_total.
const (
	resultSuccess = "success"
	resultFailure = "failure"
)

// metrics are the server's own collectors, registered on Options.Registry.
type metrics struct {
	pings   *prometheus.CounterVec   // peer, result
	rtt     *prometheus.HistogramVec // peer
	rounds  prometheus.Counter
	peers   prometheus.Gauge
	invalid prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		pings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPings,
			Help: "Pings sent to each peer, by result: success (a 2xx answer) or failure (transport error, timeout or another status).",
		}, []string{"peer", "result"}),
		rtt: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricPingSeconds,
			Help: "Round-trip time of pings that got an answer, from sending the request to reading the body, in seconds.",
			// DefBuckets span 5 ms to 10 s, which covers in-cluster answers up to the default 5 s timeout.
			Buckets: prometheus.DefBuckets,
		}, []string{"peer"}),
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricRounds,
			Help: "Completed ping rounds (each pings every configured peer once); rounds with no peers are not counted.",
		}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricPeers,
			Help: "Valid peers in the peer file as last read; 0 while the file is missing.",
		}),
		invalid: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: metricInvalid,
			Help: "Invalid lines in the peer file as last read.",
		}),
	}
	for _, c := range []prometheus.Collector{m.pings, m.rtt, m.rounds, m.peers, m.invalid} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// setPeers makes the per-peer series match the configured peers: new peers start at zero (so
// a failure rate is defined before the first failure), removed peers' series are deleted so
// that a peer file churning through names does not grow /metrics forever.
func (m *metrics) setPeers(old, cur []Peer, invalid int) {
	keep := make(map[Peer]bool, len(cur))
	for _, p := range cur {
		keep[p] = true
		m.pings.WithLabelValues(p.String(), resultSuccess)
		m.pings.WithLabelValues(p.String(), resultFailure)
		m.rtt.WithLabelValues(p.String())
	}
	for _, p := range old {
		if !keep[p] {
			m.pings.DeletePartialMatch(prometheus.Labels{"peer": p.String()})
			m.rtt.DeleteLabelValues(p.String())
		}
	}
	m.peers.Set(float64(len(cur)))
	m.invalid.Set(float64(invalid))
}

// observe counts one ping; only answered pings have a meaningful round-trip time.
func (m *metrics) observe(r Result) {
	peer := r.Peer.String()
	if r.Err == nil {
		m.pings.WithLabelValues(peer, resultSuccess).Inc()
	} else {
		m.pings.WithLabelValues(peer, resultFailure).Inc()
	}
	if r.StatusCode != 0 {
		m.rtt.WithLabelValues(peer).Observe(r.RTT.Seconds())
	}
}
