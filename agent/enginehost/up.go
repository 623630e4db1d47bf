package enginehost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/display"
	cmdBackend "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/backend"
	cmdConfig "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/config"
	"github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/metadata"
	cmdStack "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi/stack"
	"github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	pkgWorkspace "github.com/pulumi/pulumi/pkg/v3/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/env"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/spf13/pflag"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// up is `pulumi up --yes --skip-preview --suppress-progress --color=never --client=<req.Client>
// --stack <req.Stack> [--refresh]` in req.Dir (pkg/v3 cmd/pulumi/operations/up.go,
// upWorkingDirectory), with the options the operator never sets left at the CLI's defaults.
// It returns the engine's change summary and the stack's outputs (secrets as "[secret]").
func (h *host) up(ctx context.Context, req protocol.Request, sc scope, stdout, stderr io.Writer) (changes map[string]int, outputs map[string]string, ran runInfo, err error) {
	if req.Stack == "" || !filepath.IsAbs(req.Dir) || req.Client == "" {
		return nil, nil, ran, badRequest("bad up request: want a stack, an absolute dir and a client address (got %q, %q, %q)", req.Stack, req.Dir, req.Client)
	}
	sink := diag.DefaultSink(stdout, stderr, diag.FormatOptions{Color: colors.Never})
	proj, err := workspace.LoadProject(filepath.Join(req.Dir, "Pulumi.yaml"))
	if err != nil {
		return nil, nil, ran, err
	}
	if string(proj.Name) != h.project {
		return nil, nil, ran, fmt.Errorf("project %q in %s: this engine host serves project %q", proj.Name, req.Dir, h.project)
	}
	// What the CLI's --client does (cmd/pulumi/operations/io.go readProjectForUpdate).
	proj.Runtime = workspace.NewProjectRuntimeInfo("client", map[string]any{"address": req.Client})
	b, err := h.backend(ctx)
	if err != nil {
		return nil, nil, ran, err
	}
	ref, err := b.ParseStackReference(req.Stack)
	if err != nil {
		return nil, nil, ran, err
	}
	s, err := b.GetStack(ctx, ref)
	if err != nil {
		return nil, nil, ran, fmt.Errorf("%w: %w", errReadStack, err)
	}
	if s == nil {
		// cmdStack.RequireStack's words when it may not offer to create one.
		return nil, nil, ran, fmt.Errorf("%w: no stack named '%s' found", errNoStack, req.Stack)
	}
	// The stack's configuration file by its path, not found from the working directory as the
	// CLI does: requests of several stacks run at once here.
	configFile := filepath.Join(req.Dir, "Pulumi."+req.Stack+".yaml")
	cfg, sm, err := cmdConfig.GetStackConfiguration(ctx, sink, cmdStack.NewStackSecretsManagerLoaderFromEnv(), s, proj, configFile, nil)
	if err != nil {
		return nil, nil, ran, fmt.Errorf("getting stack configuration: %w", err)
	}
	if err := pkgWorkspace.ValidateStackConfigAndApplyProjectConfig(ctx, req.Stack, proj, cfg.Environment, cfg.Config,
		sm.Encrypter(), sm.Decrypter()); err != nil {
		return nil, nil, ran, fmt.Errorf("validating stack config: %w", err)
	}
	m, err := metadata.GetUpdateMetadata("", req.Dir, "auto.inline", "", false, cfg, pflag.NewFlagSet("up", pflag.ContinueOnError))
	if err != nil {
		return nil, nil, ran, fmt.Errorf("gathering environment metadata: %w", err)
	}
	opts := backend.UpdateOptions{
		AutoApprove: true,
		SkipPreview: true,
		Display: display.Options{
			Color:             colors.Never,
			SuppressProgress:  true,
			SuppressPermalink: true,
			IsInteractive:     false,
			Type:              display.DisplayProgress,
			Stdout:            stdout,
			Stderr:            stderr,
		},
		Engine: engine.UpdateOptions{
			ParallelDiff:              env.ParallelDiff.Value(),
			Parallel:                  defaultParallel(),
			Refresh:                   req.Refresh,
			UseLegacyDiff:             env.EnableLegacyDiff.Value(),
			UseLegacyRefreshDiff:      env.EnableLegacyRefreshDiff.Value(),
			DisableProviderPreview:    env.DisableProviderPreview.Value(),
			DisableResourceReferences: env.DisableResourceReferences.Value(),
			DisableOutputValues:       env.DisableOutputValues.Value(),
			Experimental:              env.Experimental.Value(),
			GeneratePlan:              env.Experimental.Value(),
		},
	}
	events := make(chan engine.Event)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range events {
			switch p := e.Payload().(type) {
			case engine.SummaryEventPayload:
				changes = protocol.Changes(p.ResourceChanges)
			case engine.ResourcePreEventPayload:
				ran.steps = true
			case engine.DiagEventPayload:
				if p.Severity == diag.Error && pluginMissing(p.Message) {
					ran.pluginMissing = true
				}
			case engine.ResourceOutputsEventPayload:
				if p.Metadata.Type == protocol.StackType && !p.Planning && p.Metadata.New != nil {
					outputs = make(map[string]string, len(p.Metadata.New.Outputs))
					for k, v := range p.Metadata.New.Outputs {
						outputs[string(k)] = protocol.OutputString(v.Mappable(), v.IsSecret())
					}
				}
			}
		}
	}()
	// The backend gets a context that is never cancelled: it writes the last checkpoint and
	// releases the lock with it, which a cancelled one would lose (gocloud's writers fail their
	// Close, and the state keeps a pending create: docs/design/engine-host.md). Cancellation
	// reaches the engine through the scope instead, as SIGINT reaches the CLI's.
	_, err = backend.UpdateStack(context.WithoutCancel(ctx), s, backend.UpdateOperation{
		Proj:               proj,
		Root:               req.Dir,
		M:                  m,
		Opts:               opts,
		StackConfiguration: cfg,
		SecretsManager:     sm,
		// The provider the CLI's own `pulumi up` passes (pkg/v3 cmd/pulumi/operations), so
		// that a checkpoint decrypts the same way in both.
		SecretsProvider: cmdBackend.SecretsProvider(cmdBackend.DefaultLoginManager),
		Scopes:          sc,
	}, events)
	close(events) // UpdateStack has delivered every event when it returns (diy apply waits for them)
	<-done
	if errors.Is(err, context.Canceled) {
		return changes, outputs, ran, errCancelled
	}
	return changes, outputs, ran, err
}

// defaultParallel is the CLI's --parallel default (cmd/pulumi/operations/up.go defaultParallel):
// PULUMI_PARALLEL when set, else four per CPU.
func defaultParallel() int32 {
	if p := env.Parallel.Value(); p > 0 && p < 1<<31 {
		return int32(p)
	}
	return int32(runtime.GOMAXPROCS(0)) * 4 //nolint:gosec // GOMAXPROCS is small
}

// scope is a request's backend.CancellationScopeSource and its one CancellationScope (an up
// with SkipPreview makes one): the CLI's own source (backend.CancellationScopes) is driven by
// SIGINT and SIGTERM to the process, which here would stop every request at once; this one is
// driven by the request's cancel line (host.cancel) and terminated when its run ends.
type scope struct {
	ctx *cancel.Context
	src *cancel.Source
}

// NewScope returns the request's scope.
func (s scope) NewScope(context.Context, chan<- engine.Event, bool) backend.CancellationScope {
	return s
}

// Context is the engine's cancellation context.
func (s scope) Context() *cancel.Context { return s.ctx }

// Close terminates the source: the engine holds the update's plugin host and context until
// its source is terminated (pkg/v3 engine/deployment.go), so without it every update would
// leave them behind in this long-lived process.
func (s scope) Close() { s.src.Terminate() }
