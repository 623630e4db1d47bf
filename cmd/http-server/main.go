// Command http-server is the peering http server of the pods the operator creates: it answers
// /ping with "pong from <hostname>" and pings the peers listed in its peer file. See
// internal/httpserver for the behaviour; this file only turns flags into Options.
//
// Its settings are flags only, never environment variables: the operator passes them as the
// container's arguments, and the container's environment is the object's spec.envFrom, which
// whoever writes the object fills from ConfigMaps and Secrets. Were HTTP_SERVER_CONFIG read from
// there, a ConfigMap could point the peer file at /proc/self/environ and have GET
// /config/environ serve the pod's environment, Secrets included, to anyone who reaches the
// Service.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
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
			&cli.StringFlag{Name: "listen", Value: httpserver.DefaultListen, Destination: &opts.Listen,
				Usage: "`ADDR` (host:port) to serve /ping, /healthz, /readyz and /metrics on"},
			&cli.StringFlag{Name: "config", Value: httpserver.DefaultConfigPath, Destination: &opts.ConfigPath,
				Usage: "peer `FILE`: one host,port a line; blank lines and lines starting with # are skipped"},
			&cli.DurationFlag{Name: "interval", Value: httpserver.DefaultInterval, Destination: &opts.Interval,
				Usage: "`PERIOD` between ping rounds; a changed peer file also starts one at once"},
			&cli.DurationFlag{Name: "timeout", Value: httpserver.DefaultTimeout, Destination: &opts.Timeout,
				Usage: "`DURATION` allowed for each ping"},
			&cli.DurationFlag{Name: "watch-interval", Value: httpserver.DefaultWatchInterval, Destination: &opts.WatchInterval,
				Usage: "how often the peer file is read to notice changes (`PERIOD`)"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: httpserver.DefaultShutdownTimeout, Destination: &opts.ShutdownTimeout,
				Usage: "`DURATION` to wait for open requests on SIGINT/SIGTERM"},
			&cli.DurationFlag{Name: "drain-delay", Value: DefaultDrainDelay, Destination: &opts.DrainDelay,
				Usage: "`DURATION` to keep serving on SIGINT/SIGTERM, /readyz answering 503, before closing the port, while the pod leaves its Service's endpoints; 0: none"},
			&cli.DurationFlag{Name: "read-timeout", Value: httpserver.DefaultReadTimeout, Destination: &opts.ReadTimeout,
				Usage: "`DURATION` allowed for reading one request"},
			&cli.DurationFlag{Name: "write-timeout", Value: httpserver.DefaultWriteTimeout, Destination: &opts.WriteTimeout,
				Usage: "`DURATION` allowed for writing one answer"},
			&cli.DurationFlag{Name: "idle-timeout", Value: httpserver.DefaultIdleTimeout, Destination: &opts.IdleTimeout,
				Usage: "`DURATION` a kept-alive connection may wait for its next request"},
			&cli.IntFlag{Name: "max-header-bytes", Value: httpserver.DefaultMaxHeaderBytes, Destination: &opts.MaxHeaderBytes,
				Usage: "largest request header, in `BYTES`; a larger one gets 431"},
			&cli.IntFlag{Name: "max-connections", Value: httpserver.DefaultMaxConnections, Destination: &opts.MaxConnections,
				Usage: "connections served at once (`N`); more wait to be accepted"},
			&cli.StringFlag{Name: "hostname", Destination: &opts.Hostname,
				Usage: "`NAME` in the /ping answer; default: the machine's hostname (the pod name)"},
			&cli.StringFlag{Name: "log-format", Value: "text", Destination: &logFormat,
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
				{"--read-timeout", opts.ReadTimeout}, {"--write-timeout", opts.WriteTimeout}, {"--idle-timeout", opts.IdleTimeout},
			} {
				if d.v <= 0 {
					return fmt.Errorf("%s %v: must be positive", d.flag, d.v)
				}
			}
			if opts.DrainDelay < 0 {
				return fmt.Errorf("--drain-delay %v: must not be negative", opts.DrainDelay)
			}
			for _, n := range []struct {
				flag string
				v    int
			}{{"--max-header-bytes", opts.MaxHeaderBytes}, {"--max-connections", opts.MaxConnections}} {
				if n.v <= 0 {
					return fmt.Errorf("%s %d: must be positive", n.flag, n.v)
				}
			}
			logger, err := newLogger(logFormat)
			if err != nil {
				return err
			}
			if ignored := settingsInEnv(os.Environ()); len(ignored) > 0 {
				logger.Warn("ignoring environment variables named like settings: the settings are flags only", "variables", ignored)
			}
			opts.Logger = logger
			opts.Registry = prometheus.NewRegistry()
			opts.Registry.MustRegister(collectors.NewGoCollector(),
				collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			return run(c.Context, opts)
		},
	}
}

// settingsInEnv returns the names of the variables of env ("NAME=value" each) that earlier
// versions read as settings (HTTP_SERVER_*), in env's order; their values are not looked at.
func settingsInEnv(env []string) []string {
	var names []string
	for _, kv := range env {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "HTTP_SERVER_") {
			names = append(names, name)
		}
	}
	return names
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
