package httpserver

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestPeersPingEachOther runs three servers on 127.0.0.1, each listing the other two in its
// peer file, and checks that every one received the others' real pong.
func TestPeersPingEachOther(t *testing.T) {
	names := []string{"alpha", "beta", "gamma"}
	servers := make([]*Server, len(names))
	recs := make([]*logRecorder, len(names))
	peers := make([]Peer, len(names))
	for i, name := range names {
		servers[i], recs[i] = newServer(t, Options{Hostname: name, Interval: 100 * time.Millisecond})
		peers[i] = peerOf(t, servers[i].Addr().String())
	}
	for i, s := range servers {
		var b strings.Builder
		b.WriteString("# the other two\n")
		for j := range servers {
			if j != i {
				b.WriteString(line(peers[j]))
			}
		}
		writePeerFile(t, s.opts.ConfigPath, b.String())
	}
	for i, s := range servers {
		start(t, s, recs[i])
	}

	for i, s := range servers {
		for j := range servers {
			if i == j {
				continue
			}
			want := "pong from " + names[j]
			r := waitResult(t, s, peers[j], names[i]+" pinged "+names[j], func(r Result) bool { return r.Err == nil })
			if r.Body != want || r.StatusCode != http.StatusOK || r.RTT <= 0 {
				t.Errorf("%s -> %s: body %q status %d rtt %v, want %q 200 >0", names[i], names[j], r.Body, r.StatusCode, r.RTT, want)
			}
			if _, ok := s.LastResults()[peers[i]]; ok {
				t.Errorf("%s has a result for itself, which is not in its file", names[i])
			}
			waitMetric(t, s, metricPings, map[string]string{"peer": peers[j].String(), "result": resultSuccess}, atLeast(1))
			waitMetric(t, s, metricPingSeconds+"_count", map[string]string{"peer": peers[j].String()}, atLeast(1))
		}
	}
	// The logs carry the body actually received, not the configured address.
	found := false
	for _, r := range recs[0].find("ping answered") {
		if r.attrs["peer"] == peers[1].String() && r.attrs["body"] == "pong from beta" && r.attrs["status"] == "200" && r.attrs["rtt_seconds"] != "" {
			found = true
		}
	}
	if !found {
		t.Errorf("alpha logged no \"ping answered\" with peer %s, body \"pong from beta\", status and rtt", peers[1])
	}
}

func TestUnreachablePeerCountsAsFailure(t *testing.T) {
	dead := closedPort(t)
	s, rec := newServer(t, Options{Interval: 50 * time.Millisecond})
	writePeerFile(t, s.opts.ConfigPath, line(dead))
	start(t, s, rec)

	waitMetric(t, s, metricPings, map[string]string{"peer": dead.String(), "result": resultFailure}, atLeast(2))
	page := scrape(t, s)
	if v, ok := metricValue(page, metricPings, map[string]string{"peer": dead.String(), "result": resultSuccess}); !ok || v != 0 {
		t.Errorf("success count of %s = %v (found %v), want 0", dead, v, ok)
	}
	if v, ok := metricValue(page, metricPingSeconds+"_count", map[string]string{"peer": dead.String()}); !ok || v != 0 {
		t.Errorf("rtt observations of %s = %v (found %v), want 0: an unanswered ping has no round-trip time", dead, v, ok)
	}
	r := s.LastResults()[dead]
	if r.Err == nil || r.StatusCode != 0 || r.Timeout() {
		t.Errorf("result = %+v, want a connection error that is not a timeout", r)
	}
	if len(rec.find("ping failed")) == 0 {
		t.Error("no \"ping failed\" logged")
	}
}

// TestSlowPeerTimesOut pings a peer that never answers within the timeout next to one that
// answers: the slow one fails with a timeout, the good one still succeeds, and rounds keep
// completing (a hung round would stop the rounds counter).
func TestSlowPeerTimesOut(t *testing.T) {
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
		fmt.Fprint(w, "too late")
	}))
	t.Cleanup(slow.Close)
	t.Cleanup(func() { close(release) }) // runs before slow.Close, which waits for handlers
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "pong from good")
	}))
	t.Cleanup(good.Close)

	slowPeer, goodPeer := peerOf(t, slow.Listener.Addr().String()), peerOf(t, good.Listener.Addr().String())
	s, rec := newServer(t, Options{Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond})
	writePeerFile(t, s.opts.ConfigPath, line(slowPeer)+line(goodPeer))
	start(t, s, rec)

	waitMetric(t, s, metricRounds, nil, atLeast(3))
	r := s.LastResults()[slowPeer]
	if r.Err == nil || !r.Timeout() {
		t.Errorf("slow peer result = %+v, want a timeout error", r)
	}
	if g := s.LastResults()[goodPeer]; g.Err != nil || g.Body != "pong from good" {
		t.Errorf("good peer result = %+v, want success with its body", g)
	}
	page := scrape(t, s)
	if v, _ := metricValue(page, metricPings, map[string]string{"peer": slowPeer.String(), "result": resultFailure}); v < 2 {
		t.Errorf("failures of the slow peer = %v, want >= 2", v)
	}
	timeoutLogged := false
	for _, l := range rec.find("ping failed") {
		if l.attrs["peer"] == slowPeer.String() && l.attrs["timeout"] == "true" {
			timeoutLogged = true
		}
	}
	if !timeoutLogged {
		t.Error("no \"ping failed\" with timeout=true logged for the slow peer")
	}
}

func TestErrorStatusIsFailure(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "  boom  ", http.StatusInternalServerError)
	}))
	t.Cleanup(broken.Close)
	p := peerOf(t, broken.Listener.Addr().String())
	s, rec := newServer(t, Options{})
	writePeerFile(t, s.opts.ConfigPath, line(p))
	start(t, s, rec)

	r := waitResult(t, s, p, "a result for the broken peer", func(Result) bool { return true })
	if !errors.Is(r.Err, errStatus) || r.StatusCode != http.StatusInternalServerError || r.Body != "boom" {
		t.Errorf("result = %+v, want status 500, body \"boom\", an unexpected-status error", r)
	}
	waitMetric(t, s, metricPings, map[string]string{"peer": p.String(), "result": resultFailure}, atLeast(1))
	// An answer, even an error, has a round-trip time.
	waitMetric(t, s, metricPingSeconds+"_count", map[string]string{"peer": p.String()}, atLeast(1))
}
