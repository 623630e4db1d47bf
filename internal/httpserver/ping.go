package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const (
	// maxConcurrentPings bounds the pings in flight in one round, so a long peer file cannot
	// open hundreds of connections at once; with the default timeout a round of N peers takes
	// at most ceil(N/16) * 5 s.
	maxConcurrentPings = 16
	// maxBodyBytes is how much of an answer is read and kept in Result.Body and the logs: a
	// pong is ~30 bytes, anything longer is not from a peer of ours.
	maxBodyBytes = 256
)

// errStatus marks an answer whose status is not 2xx.
var errStatus = errors.New("unexpected status")

// Result is the outcome of one ping of one peer.
type Result struct {
	// Peer is the destination.
	Peer Peer
	// Round is the number of the ping round, counting from 1.
	Round uint64
	// At is when the request was sent.
	At time.Time
	// RTT is the round-trip time: from sending the request to reading the (bounded) body, or
	// to the error.
	RTT time.Duration
	// StatusCode is the answer's HTTP status; 0 when there was no answer.
	StatusCode int
	// Body is the answer's body, at most 256 bytes, trimmed, invalid UTF-8 replaced.
	Body string
	// Err is nil for a 2xx answer. Otherwise it wraps the transport error (errors.Is
	// context.DeadlineExceeded for a timeout) or, for another status, an "unexpected status".
	Err error
}

// Timeout reports whether the ping failed because the peer did not answer within
// Options.Timeout.
func (r Result) Timeout() bool {
	return errors.Is(r.Err, context.DeadlineExceeded)
}

// newPingClient returns the client for pings. Keep-alives are off so that every ping resolves
// the name and connects afresh, which is what a reachability check should measure (and a peer
// behind a headless Service may be a different pod each time); proxies from the environment
// are ignored because peers are cluster-internal addresses.
func newPingClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DisableKeepAlives = true
	return &http.Client{
		Transport: t,
		// A peer's redirect is an answer in itself; following it would ping something else.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// pingRound pings every peer once, at most maxConcurrentPings at a time, and returns when all
// have answered, failed or timed out. Pings cut short because ctx ended (shutdown) are neither
// counted nor kept.
func (s *Server) pingRound(ctx context.Context, peers []Peer) {
	if len(peers) == 0 {
		return
	}
	round := s.rounds.Add(1)
	sem := make(chan struct{}, maxConcurrentPings)
	var wg sync.WaitGroup
	for _, p := range peers {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			r := s.ping(ctx, p)
			r.Round = round
			if ctx.Err() != nil {
				return
			}
			s.record(r)
		})
	}
	wg.Wait()
	if ctx.Err() == nil {
		s.metrics.rounds.Inc()
	}
}

// ping sends one GET to the peer's /ping with the per-request timeout and logs the outcome.
func (s *Server) ping(ctx context.Context, p Peer) Result {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	r := Result{Peer: p, At: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL(), nil)
	if err != nil {
		// ParsePeers only lets through hosts that make a valid URL; this is a safety net.
		r.Err = fmt.Errorf("build ping request: %w", err)
		s.log.Warn("ping failed", "peer", p.String(), "error", r.Err)
		return r
	}
	resp, err := s.client.Do(req)
	if err != nil {
		r.RTT = time.Since(r.At)
		r.Err = err // *url.Error: `Get "http://...": <cause>`
		s.log.Warn("ping failed", "peer", p.String(), "url", p.URL(), "rtt_seconds", r.RTT.Seconds(),
			"timeout", r.Timeout(), "error", err)
		return r
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	resp.Body.Close()
	r.RTT = time.Since(r.At)
	r.StatusCode = resp.StatusCode
	r.Body = strings.TrimSpace(strings.ToValidUTF8(string(body), "\uFFFD"))
	switch {
	case err != nil:
		r.Err = fmt.Errorf("read ping answer from %s: %w", p.URL(), err)
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		r.Err = fmt.Errorf("ping %s: %w %d", p.URL(), errStatus, resp.StatusCode)
	}
	if r.Err != nil {
		s.log.Warn("ping failed", "peer", p.String(), "url", p.URL(), "status", r.StatusCode,
			"body", r.Body, "rtt_seconds", r.RTT.Seconds(), "timeout", r.Timeout(), "error", r.Err)
		return r
	}
	s.log.Info("ping answered", "peer", p.String(), "url", p.URL(), "status", r.StatusCode,
		"body", r.Body, "rtt_seconds", r.RTT.Seconds())
	return r
}

// record keeps r as the peer's latest result and counts it.
func (s *Server) record(r Result) {
	s.metrics.observe(r)
	s.mu.Lock()
	s.results[r.Peer] = r
	s.mu.Unlock()
}
