package main

// The in-process engine: DIY backend (file://), stack created in-process, updates through
// backend.UpdateStack with an event channel, cancellation through a CancellationScopeSource
// driven by a context (not by signals), plugin environment given per update through a
// HostFactory wrapper.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/backend/display"
	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	backendsecrets "github.com/pulumi/pulumi/pkg/v3/backend/secrets"
	"github.com/pulumi/pulumi/pkg/v3/engine"
	"github.com/pulumi/pulumi/pkg/v3/resource/deploy"
	"github.com/pulumi/pulumi/pkg/v3/resource/plugin"
	"github.com/pulumi/pulumi/pkg/v3/secrets"
	"github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	"github.com/pulumi/pulumi/pkg/v3/util/cancel"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/env"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	envutil "github.com/pulumi/pulumi/sdk/v3/go/common/util/env"
	"github.com/pulumi/pulumi/sdk/v3/go/common/version"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// inproc is one process-wide engine front: one DIY backend object for all stacks.
type inproc struct {
	project    string
	root       string // the program's "root" directory (engine pwd); holds nothing
	phrase     string
	b          diy.Backend
	pluginEnv  map[string]string // environment for provider plugins, per update (HostFactory)
	sink       diag.Sink
	mu         sync.Mutex
	sms        map[string]secrets.Manager // secrets managers by state (JSON), this process's cache
	kdfCount   atomic.Int64               // passphrase key derivations done by this wrapper
	kdfSeconds atomicFloat
}

type atomicFloat struct {
	mu sync.Mutex
	v  float64
}

func (a *atomicFloat) add(x float64) { a.mu.Lock(); a.v += x; a.mu.Unlock() }
func (a *atomicFloat) get() float64  { a.mu.Lock(); defer a.mu.Unlock(); return a.v }

func newInproc(ctx context.Context, project, backendURL, root, phrase string, pluginEnv map[string]string) (*inproc, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	sink := diag.DefaultSink(io.Discard, os.Stderr, diag.FormatOptions{Color: colors.Never})
	proj := &workspace.Project{Name: tokens.PackageName(project), Runtime: workspace.NewProjectRuntimeInfo("go", nil)}
	b, err := diy.New(ctx, sink, backendURL, proj)
	if err != nil {
		return nil, err
	}
	return &inproc{project: project, root: root, phrase: phrase, b: b, pluginEnv: pluginEnv, sink: sink,
		sms: map[string]secrets.Manager{}}, nil
}

// OfType makes inproc the update's secrets.Provider: a state this process has seen (it created
// the stack, or read it before) costs no key derivation; another is derived once, from the
// passphrase held in memory (not from PULUMI_CONFIG_PASSPHRASE).
func (ip *inproc) OfType(ctx context.Context, ty string, state json.RawMessage) (secrets.Manager, error) {
	if ty != passphrase.Type {
		return backendsecrets.DefaultProvider.OfType(ctx, ty, state)
	}
	ip.mu.Lock()
	sm, ok := ip.sms[string(state)]
	ip.mu.Unlock()
	if ok {
		return sm, nil
	}
	var s struct {
		Salt string `json:"salt"`
	}
	if err := json.Unmarshal(state, &s); err != nil {
		return nil, err
	}
	t0 := time.Now()
	sm, err := passphrase.GetPassphraseSecretsManager(ip.phrase, s.Salt)
	ip.kdfSeconds.add(time.Since(t0).Seconds())
	ip.kdfCount.Add(1)
	if err != nil {
		return nil, err
	}
	ip.mu.Lock()
	ip.sms[string(state)] = sm
	ip.mu.Unlock()
	return sm, nil
}

// createStack is `pulumi stack init` in-process: a new passphrase secrets manager (one PBKDF2
// key derivation, a new salt) and CreateStack with an initial deployment that records it, as
// cmd/pulumi/stack/io.go CreateStack does. No Pulumi.<stack>.yaml is written: the salt is kept
// in the state's secrets_providers (and this process's cache).
func (ip *inproc) createStack(ctx context.Context, name string) (backend.Stack, secrets.Manager, error) {
	ref, err := ip.b.ParseStackReference(name)
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	_, sm, err := passphrase.NewPassphraseSecretsManager(ip.phrase)
	ip.kdfSeconds.add(time.Since(t0).Seconds())
	ip.kdfCount.Add(1)
	if err != nil {
		return nil, nil, err
	}
	ip.mu.Lock()
	ip.sms[string(sm.State())] = sm
	ip.mu.Unlock()
	m := deploy.Manifest{Time: time.Now(), Version: version.Version}
	m.Magic = m.NewMagic()
	d, err := json.Marshal(&apitype.DeploymentV3{
		Manifest:         m.Serialize(),
		SecretsProviders: &apitype.SecretsProvidersV1{Type: sm.Type(), State: sm.State()},
	})
	if err != nil {
		return nil, nil, err
	}
	st, err := ip.b.CreateStack(ctx, ref, ip.root, &apitype.UntypedDeployment{Version: 3, Deployment: d}, nil)
	if err != nil {
		return nil, nil, err
	}
	return st, sm, nil
}

// getStack opens an existing stack and its secrets manager (from the state's secrets_providers).
func (ip *inproc) getStack(ctx context.Context, name string) (backend.Stack, secrets.Manager, error) {
	ref, err := ip.b.ParseStackReference(name)
	if err != nil {
		return nil, nil, err
	}
	st, err := ip.b.GetStack(ctx, ref)
	if err != nil {
		return nil, nil, err
	}
	if st == nil {
		return nil, nil, fmt.Errorf("no stack named %s", name)
	}
	snap, err := st.Snapshot(ctx, ip)
	if err != nil {
		return nil, nil, err
	}
	return st, snap.SecretsManager, nil
}

// outcome is what the event channel told.
type outcome struct {
	changes map[string]int
	outputs map[string]string
}

type opKind int

const (
	opUp opKind = iota
	opDestroy
)

// run is one engine operation on st with program served in-process. ctx cancels it
// gracefully (through the CancellationScope); the backend itself gets a context without
// cancellation so that the final checkpoint write and the lock removal still happen.
func (ip *inproc) run(ctx context.Context, kind opKind, st backend.Stack, sm secrets.Manager, program pulumi.RunFunc) (outcome, error) {
	srv, err := serveProgram(program)
	if err != nil {
		return outcome{}, err
	}
	defer srv.close()
	proj := &workspace.Project{
		Name:    tokens.PackageName(ip.project),
		Runtime: workspace.NewProjectRuntimeInfo("client", map[string]any{"address": srv.address}),
	}
	op := backend.UpdateOperation{
		Proj: proj,
		Root: ip.root,
		M:    &backend.UpdateMetadata{Environment: map[string]string{"exec.kind": "auto.inline"}},
		Opts: backend.UpdateOptions{
			AutoApprove: true,
			SkipPreview: true,
			Display: display.Options{
				Color: colors.Never, SuppressProgress: true, SuppressPermalink: true,
				Stdout: io.Discard, Stderr: io.Discard, Type: display.DisplayProgress,
			},
			Engine: engine.UpdateOptions{
				Parallel:    8, // the CLI's default: GOMAXPROCS*4
				HostFactory: ip.hostFactory(),
			},
		},
		StackConfiguration: backend.StackConfiguration{Config: config.Map{}, Decrypter: sm.Decrypter()},
		SecretsManager:     sm,
		SecretsProvider:    ip,
		Scopes:             ctxScopes{parent: ctx},
	}
	bctx := context.WithoutCancel(ctx)
	if os.Getenv("INPROC_NAIVE_CTX") == "1" { // to show what goes wrong when the backend sees the cancel
		bctx = ctx
	}
	if kind == opDestroy {
		changes, err := backend.DestroyStack(bctx, st, op)
		return outcome{changes: toCounts(changes)}, err
	}
	events := make(chan engine.Event)
	var out outcome
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range events {
			switch p := e.Payload().(type) {
			case engine.SummaryEventPayload:
				out.changes = toCounts(p.ResourceChanges)
			case engine.ResourceOutputsEventPayload:
				if p.Metadata.Type == "pulumi:pulumi:Stack" && !p.Planning && p.Metadata.New != nil {
					out.outputs = map[string]string{}
					for k, v := range p.Metadata.New.Outputs {
						if v.IsSecret() {
							out.outputs[string(k)] = "[secret]"
						} else {
							out.outputs[string(k)] = fmt.Sprint(v.Mappable())
						}
					}
				}
			}
		}
	}()
	changes, err := backend.UpdateStack(bctx, st, op, events)
	close(events) // UpdateStack has delivered every event before it returns (diy apply waits for eventsDone)
	<-done
	if out.changes == nil {
		out.changes = toCounts(changes)
	}
	return out, err
}

func toCounts[K ~string](m map[K]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[string(k)] = v
	}
	return out
}

// ctxScopes is a backend.CancellationScopeSource driven by a context instead of SIGINT/SIGTERM
// (backend.CancellationScopes installs signal handlers). Cancelling parent asks the engine to
// cancel gracefully: no new steps, in-flight ones finish, the snapshot is written. A second
// stage (Terminate) could follow after a grace period; not done here.
type ctxScopes struct{ parent context.Context }

type ctxScope struct {
	c    *cancel.Context
	src  *cancel.Source
	stop chan struct{}
}

func (s ctxScopes) NewScope(_ context.Context, _ chan<- engine.Event, _ bool) backend.CancellationScope {
	c, src := cancel.NewContext(context.WithoutCancel(s.parent))
	sc := &ctxScope{c: c, src: src, stop: make(chan struct{})}
	go func() {
		select {
		case <-s.parent.Done():
			src.Cancel()
		case <-sc.stop:
		}
	}()
	return sc
}

func (s *ctxScope) Context() *cancel.Context { return s.c }

// Close is called by the backend once the engine has returned (diy apply, after the run).
// Terminating then releases the engine's goroutine that holds the plugin context and host
// until termination (engine/deployment.go:242-246); without it each update leaks them.
func (s *ctxScope) Close() {
	close(s.stop)
	if !noTerminate {
		s.src.Terminate()
	}
}

// noTerminate (INPROC_NO_TERMINATE=1) keeps the leak, to measure it.
var noTerminate = os.Getenv("INPROC_NO_TERMINATE") == "1"

// hostFactory is backend.DefaultHostFactory with a Provider that adds ip.pluginEnv to each
// provider plugin's environment: per update, not through the process environment.
func (ip *inproc) hostFactory() engine.HostFactory {
	def := backend.DefaultHostFactory(ip.b.GetReadOnlyCloudRegistry())
	return func(ctx context.Context, d, statusD diag.Sink, debug plugin.DebugContext) (plugin.Host, error) {
		h, err := def(ctx, d, statusD, debug)
		if err != nil {
			return nil, err
		}
		return envHost{Host: h, extra: ip.pluginEnv}, nil
	}
}

type envHost struct {
	plugin.Host
	extra map[string]string
}

func (h envHost) Provider(ctx *plugin.Context, d workspace.PluginDescriptor, e env.Env) (plugin.Provider, error) {
	var base envutil.Store = envutil.Global
	if e != nil && e.GetStore() != nil {
		base = e.GetStore()
	}
	return h.Host.Provider(ctx, d, envutil.NewEnv(envutil.JoinStore(envutil.MapStore(h.extra), base)))
}
