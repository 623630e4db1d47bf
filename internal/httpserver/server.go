// Package httpserver is the peering http server that runs in the pods the operator creates: it
// answers GET /ping with "pong from <hostname>", GET /config/<key> with the mounted ConfigMap's
// value of key, and pings every peer listed in its peer file
// (a ConfigMap key mounted as a file, one "host,port" a line) every interval and as soon as
// the file changes, logging each answer and exporting counters and round-trip times as
// Prometheus metrics. It replaces the original image measutosh/http-server, keeping its /ping
// answer and file format.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
)

// Defaults for the zero values of Options.
const (
	DefaultListen          = ":8080"
	DefaultConfigPath      = "/config/hostports"
	DefaultInterval        = 30 * time.Second
	DefaultTimeout         = 5 * time.Second
	DefaultWatchInterval   = time.Second
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading one request, headers and body. Every request the
	// server answers is a GET without a body from a probe, Prometheus or a peer, sent in one
	// write; a client that takes longer holds a connection for nothing.
	DefaultReadTimeout = 10 * time.Second
	// DefaultWriteTimeout bounds writing one answer: at most a ConfigMap's 1 MiB, or the
	// metrics page, to a client on the pod network.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a kept-alive connection may wait for its next request.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxHeaderBytes bounds a request's header lines: a probe's, Prometheus' (its bearer
	// token included) and a peer's are well under 1 KiB; net/http's own default is 1 MiB.
	DefaultMaxHeaderBytes = 16 << 10
	// DefaultMaxConnections bounds the connections served at once; further ones wait in the
	// kernel's accept queue until one ends. With DefaultMaxHeaderBytes it bounds what clients
	// can make the server hold (a few tens of KiB each).
	DefaultMaxConnections = 512
)

// readHeaderTimeout bounds reading a request's header lines, within Options.ReadTimeout.
const readHeaderTimeout = 10 * time.Second

// Options configure a Server. Zero values take the Default* constants; negative durations are
// an error.
type Options struct {
	// Listen is the TCP address to serve on, host:port; port 0 picks a free port (see Addr).
	Listen string
	// ConfigPath is the peer file, one "host,port" a line (see ParsePeers).
	ConfigPath string
	// Interval is the time between ping rounds.
	Interval time.Duration
	// Timeout bounds each ping, from connecting to reading the answer.
	Timeout time.Duration
	// WatchInterval is how often the peer file is read to notice changes.
	WatchInterval time.Duration
	// ShutdownTimeout bounds how long Run waits for open requests when ctx ends.
	ShutdownTimeout time.Duration
	// DrainDelay is how long Run keeps serving after ctx ends, with /readyz answering 503,
	// before it stops accepting connections. Kubernetes takes a terminating pod out of its
	// Service's endpoints while the pod already has SIGTERM (the EndpointSlice update, then
	// kube-proxy's rules, both asynchronous), so new connections keep arriving for a moment;
	// closing the listener at once refuses them (test/e2e/realnode checks that a rollout fails
	// no request). Zero means no delay; the http-server command's --drain-delay defaults to
	// 5 s, well inside the pod's default 30 s grace period.
	DrainDelay time.Duration
	// ReadTimeout, WriteTimeout and IdleTimeout are http.Server's: reading one request,
	// writing one answer, waiting for a kept-alive connection's next request.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header lines (http.Server.MaxHeaderBytes); a larger
	// header gets 431.
	MaxHeaderBytes int
	// MaxConnections bounds the connections served at once; others wait to be accepted.
	MaxConnections int
	// Hostname is named in the /ping answer; empty means os.Hostname().
	Hostname string
	// Logger receives the structured logs; nil means slog.Default().
	Logger *slog.Logger
	// Registry receives the server's metrics and is what /metrics serves; nil means a new,
	// empty registry. It must not already hold metrics of the same names.
	Registry *prometheus.Registry
}

// Server is one peering http server. Create it with New, then call Run once.
type Server struct {
	opts    Options
	log     *slog.Logger
	ln      net.Listener
	http    *http.Server
	client  *http.Client
	metrics *metrics

	started    atomic.Bool
	ready      atomic.Bool   // the peer file has been checked at least once
	draining   atomic.Bool   // ctx ended: serving out DrainDelay, /readyz 503
	rounds     atomic.Uint64 // ping rounds started
	fileChecks atomic.Uint64 // reads of the peer file, for tests

	file peerFile // owned by the peer loop

	mu      sync.Mutex
	results map[Peer]Result // latest result per configured peer
}

// New validates opts, registers the metrics and binds the listening socket, so that Addr is
// known before Run. Its errors are an invalid option (a negative duration or limit, a peer file
// under /proc, /sys or /dev), a metric name already registered, a failing os.Hostname, or the
// listen error (address in use, permission denied). A Server that is never Run should be
// closed with Close.
func New(opts Options) (*Server, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	if opts.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("get hostname: %w", err)
		}
		opts.Hostname = h
	}
	m, err := newMetrics(opts.Registry)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", opts.Listen, err)
	}
	s := &Server{
		opts:    opts,
		log:     opts.Logger,
		ln:      netutil.LimitListener(ln, opts.MaxConnections),
		client:  newPingClient(),
		metrics: m,
		results: map[Peer]Result{},
	}
	s.http = &http.Server{
		Handler:           s.routes(),
		ReadHeaderTimeout: min(readHeaderTimeout, opts.ReadTimeout),
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    opts.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

func (o *Options) setDefaults() error {
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"interval", &o.Interval, DefaultInterval},
		{"timeout", &o.Timeout, DefaultTimeout},
		{"watch interval", &o.WatchInterval, DefaultWatchInterval},
		{"shutdown timeout", &o.ShutdownTimeout, DefaultShutdownTimeout},
		{"read timeout", &o.ReadTimeout, DefaultReadTimeout},
		{"write timeout", &o.WriteTimeout, DefaultWriteTimeout},
		{"idle timeout", &o.IdleTimeout, DefaultIdleTimeout},
	} {
		if *d.v < 0 {
			return fmt.Errorf("%s %s: must not be negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.DrainDelay < 0 {
		return fmt.Errorf("drain delay %s: must not be negative", o.DrainDelay)
	}
	for _, l := range []struct {
		name string
		v    *int
		def  int
	}{
		{"max header bytes", &o.MaxHeaderBytes, DefaultMaxHeaderBytes},
		{"max connections", &o.MaxConnections, DefaultMaxConnections},
	} {
		if *l.v < 0 {
			return fmt.Errorf("%s %d: must not be negative", l.name, *l.v)
		}
		if *l.v == 0 {
			*l.v = l.def
		}
	}
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	if o.ConfigPath == "" {
		o.ConfigPath = DefaultConfigPath
	}
	if err := checkConfigPath(o.ConfigPath); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	return nil
}

// Addr returns the address the server listens on, with the actual port when Options.Listen
// asked for port 0.
func (s *Server) Addr() net.Addr {
	return s.ln.Addr()
}

// Close releases the listening socket of a Server that was never Run; Run closes it itself.
func (s *Server) Close() error {
	return s.ln.Close()
}

// Run serves HTTP and pings the peers until ctx ends, then stops the pings, shuts the HTTP
// server down (waiting up to Options.ShutdownTimeout for open requests) and returns nil. It
// returns an error if the server fails to serve, if the shutdown times out, or if Run was
// called before.
func (s *Server) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("run http server: already started")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	s.log.Info("http server listening", "addr", s.Addr().String(), "hostname", s.opts.Hostname,
		"config", s.opts.ConfigPath, "interval", s.opts.Interval.String(), "timeout", s.opts.Timeout.String())
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.http.Serve(s.ln) }()
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		s.peerLoop(ctx)
	}()

	var err error
	select {
	case <-ctx.Done():
		if s.opts.DrainDelay > 0 {
			s.draining.Store(true)
			s.log.Info("draining: serving on, not ready, before shutting down", "delay", s.opts.DrainDelay.String())
			select {
			case <-time.After(s.opts.DrainDelay):
			case err = <-serveErr:
				err = fmt.Errorf("serve http: %w", err)
			}
		}
	case err = <-serveErr:
		err = fmt.Errorf("serve http: %w", err)
		cancel()
	}
	<-loopDone

	s.log.Info("http server shutting down")
	shutdownCtx, cancelShutdown := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancelShutdown()
	if shErr := s.http.Shutdown(shutdownCtx); shErr != nil && err == nil {
		err = fmt.Errorf("shut down http server: %w", shErr)
	}
	return err
}

// LastResults returns a copy of the latest ping result of each configured peer. Peers not yet
// pinged are absent; peers removed from the file are dropped.
func (s *Server) LastResults() map[Peer]Result {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.results)
}

// Rounds returns the number of ping rounds started so far (rounds with no peers are skipped
// and not counted).
func (s *Server) Rounds() uint64 {
	return s.rounds.Load()
}

// routes: /ping as the original (any method), /config/<key>, probes, metrics; the mux answers
// 404 for anything else, including /ping/ and /.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /config/{key}", s.serveConfigKey)
	mux.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "pong from "+s.opts.Hostname)
	})
	// Liveness: answering at all is the signal.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n")
	})
	// Readiness: the peer file has been looked at (read, or found missing) at least once.
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.draining.Load() {
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if !s.ready.Load() {
			http.Error(w, "peer file not checked yet", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok\n")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(s.opts.Registry, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}))
	return mux
}
