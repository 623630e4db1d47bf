// Command http-server is the peering http server of the pods the operator creates: it answers
// /ping with "pong from <hostname>" and pings the peers listed in its peer file. See
// internal/httpserver for the behaviour; this file only turns flags and environment into
// Options.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/urfave/cli/v2"

	"github.com/pulumi-operator/pulumi-operator/internal/httpserver"
)

// DefaultDrainDelay is --drain-delay's default (httpserver.Options.DrainDelay): long enough for
// kube-proxy to drop a terminating pod's endpoint, well inside the default 30 s grace period.
const DefaultDrainDelay = 5 * time.Second

func main() {
	if err := newApp().Run(os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "http-server:", err)
		os.Exit(1)
	}
}

// newApp returns the CLI; its Action serves until SIGINT/SIGTERM or until the context given to
// RunContext ends.
func newApp() *cli.App {
	var (
		opts      httpserver.Options
		logFormat string
	)
	return &cli.App{
		Name:            "http-server",
		Usage:           "answer /ping and ping the peers listed in a file",
		HideHelpCommand: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", EnvVars: []string{"HTTP_SERVER_LISTEN"}, Value: httpserver.DefaultListen, Destination: &opts.Listen,
				Usage: "`ADDR` (host:port) to serve /ping, /healthz, /readyz and /metrics on"},
			&cli.StringFlag{Name: "config", EnvVars: []string{"HTTP_SERVER_CONFIG"}, Value: httpserver.DefaultConfigPath, Destination: &opts.ConfigPath,
				Usage: "peer `FILE`: one host,port a line; blank lines and lines starting with # are skipped"},
			&cli.DurationFlag{Name: "interval", EnvVars: []string{"HTTP_SERVER_INTERVAL"}, Value: httpserver.DefaultInterval, Destination: &opts.Interval,
				Usage: "`PERIOD` between ping rounds; a changed peer file also starts one at once"},
			&cli.DurationFlag{Name: "timeout", EnvVars: []string{"HTTP_SERVER_TIMEOUT"}, Value: httpserver.DefaultTimeout, Destination: &opts.Timeout,
				Usage: "`DURATION` allowed for each ping"},
			&cli.DurationFlag{Name: "watch-interval", EnvVars: []string{"HTTP_SERVER_WATCH_INTERVAL"}, Value: httpserver.DefaultWatchInterval, Destination: &opts.WatchInterval,
				Usage: "how often the peer file is read to notice changes (`PERIOD`)"},
			&cli.DurationFlag{Name: "shutdown-timeout", EnvVars: []string{"HTTP_SERVER_SHUTDOWN_TIMEOUT"}, Value: httpserver.DefaultShutdownTimeout, Destination: &opts.ShutdownTimeout,
				Usage: "`DURATION` to wait for open requests on SIGINT/SIGTERM"},
			&cli.DurationFlag{Name: "drain-delay", EnvVars: []string{"HTTP_SERVER_DRAIN_DELAY"}, Value: DefaultDrainDelay, Destination: &opts.DrainDelay,
				Usage: "`DURATION` to keep serving on SIGINT/SIGTERM, /readyz answering 503, before closing the port, while the pod leaves its Service's endpoints; 0: none"},
			&cli.StringFlag{Name: "hostname", EnvVars: []string{"HTTP_SERVER_HOSTNAME"}, Destination: &opts.Hostname,
				Usage: "`NAME` in the /ping answer; default: the machine's hostname (the pod name)"},
			&cli.StringFlag{Name: "log-format", EnvVars: []string{"HTTP_SERVER_LOG_FORMAT"}, Value: "text", Destination: &logFormat,
				Usage: "log `FORMAT`: text or json"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return fmt.Errorf("unexpected arguments %q", c.Args().Slice())
			}
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{
				{"--interval", opts.Interval}, {"--timeout", opts.Timeout},
				{"--watch-interval", opts.WatchInterval}, {"--shutdown-timeout", opts.ShutdownTimeout},
			} {
				if d.v <= 0 {
					return fmt.Errorf("%s %v: must be positive", d.flag, d.v)
				}
			}
			if opts.DrainDelay < 0 {
				return fmt.Errorf("--drain-delay %v: must not be negative", opts.DrainDelay)
			}
			logger, err := newLogger(logFormat)
			if err != nil {
				return err
			}
			opts.Logger = logger
			opts.Registry = prometheus.NewRegistry()
			opts.Registry.MustRegister(collectors.NewGoCollector(),
				collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			return run(c.Context, opts)
		},
	}
}

func newLogger(format string) (*slog.Logger, error) {
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, nil)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, nil)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

func run(parent context.Context, opts httpserver.Options) error {
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := httpserver.New(opts)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}
