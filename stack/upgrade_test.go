package stack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// upgradeProgram is the operator's program for d, plus a secret output, so that the state holds
// the Kubernetes provider's resources and a value encrypted with the stack's passphrase salt.
func upgradeProgram(d api.Desired) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		if err := infra.Program(d)(ctx); err != nil {
			return err
		}
		ctx.Export("token", pulumi.ToSecret(pulumi.String("s3cr3t-"+d.Name)))
		return nil
	}
}

// stateWriter returns the CLI version that last wrote the stored state of stack name in b: the
// checkpoint's deployment manifest names it (pkg/v3 apitype.ManifestV1.Version).
func stateWriter(t *testing.T, b stateBackend, name string) string {
	t.Helper()
	var cp struct {
		Checkpoint struct {
			Latest struct {
				Manifest struct{ Version string }
			}
		}
	}
	raw := b.read(t, stacksPrefix+name+".json")
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatalf("the stored state of %s: %v", name, err)
	}
	return cp.Checkpoint.Latest.Manifest.Version
}

// TestUpgradeFromPreviousRelease: stacks that the previous release's pulumi CLI
// (testenv.PreviousPulumiCLI, Pulumi v3.255.0) wrote on a file and a PostgreSQL backend, with
// the operator's program and the real Kubernetes provider on the local cluster, open with the
// current release: a preview finds no change, an up applies a change (one stack of each backend
// through the current engine host, one through the current CLI), the secret output reads back,
// and destroy removes the stack and its objects. The old stacks are written by the old CLI
// (`pulumi stack init` and `pulumi up`): the previous release's engine host speaks a protocol
// that only the previous operator spoke, and it wrote state with the same pkg/v3 as that CLI. On
// the file backend the new Manager keeps the old one's workspaces (the operator's state volume);
// on PostgreSQL it starts with none, as a pod without a volume.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	previous := testenv.PreviousPulumiCLI(t)
	current := testenv.PulumiCLI(t)
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	backends := map[string]struct {
		backend       func(t *testing.T) stateBackend
		keepWorkspace bool
	}{
		"file":       {func(t *testing.T) stateBackend { b, _ := fileBackend(t); return b }, true},
		"PostgreSQL": {postgresBackend, false},
	}
	for name, tc := range backends {
		t.Run(name, func(t *testing.T) {
			b := tc.backend(t)
			ns := c.Namespace(t)
			suffix := make([]byte, 4)
			_, _ = rand.Read(suffix)
			cluster := "up-" + hex.EncodeToString(suffix)
			env := map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase", "KUBECONFIG": c.Kubeconfig}
			for k, v := range b.env {
				env[k] = v
			}
			workRoot := t.TempDir()
			manager := func(cli string, engineHost bool) *Manager {
				t.Helper()
				cfg := Config{Project: "kindcustomhttp", BackendURL: b.url, WorkRoot: workRoot, PulumiPath: cli,
					PulumiHome: DefaultPulumiHome(current), ClusterName: cluster, Env: env}
				if engineHost {
					cfg.EngineHost = filepath.Join(filepath.Dir(cli), EngineHost)
				}
				m, err := New(cfg)
				if err != nil {
					t.Fatalf("New with %s: %v", cli, err)
				}
				t.Cleanup(m.Close)
				return m
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()

			// The previous release's CLI writes two stacks.
			old := manager(previous, false)
			prevVersion := "v" + old.CLIVersion().String()
			if prevVersion == "v"+PinnedCLIVersion {
				t.Fatalf("the previous release's CLI %s reports the current version %s", previous, prevVersion)
			}
			desired := func(name, greeting string) api.Desired {
				return api.Desired{Namespace: ns, Name: name, ReplicaCount: 1, Port: 8080, ContainerPort: 8080,
					Image: api.DefaultImage, ServiceType: api.DefaultServiceType, RolloutOnConfigChange: true,
					ConfigMapData: map[string]string{"greeting": greeting}}
			}
			stacks := []struct{ name string }{{"by-host"}, {"by-cli"}}
			names := map[string]string{}
			for _, s := range stacks {
				stack, err := old.StackName(ns, s.name)
				if err != nil {
					t.Fatal(err)
				}
				names[s.name] = stack
				res, err := old.Up(ctx, stack, upgradeProgram(desired(s.name, "old")), RunOptions{})
				if err != nil {
					t.Fatalf("up %s with the previous release: %v", s.name, err)
				}
				if res.Changes["create"] == 0 || res.Outputs["token"] != "[secret]" {
					t.Fatalf("up %s with the previous release: changes %v, outputs %v; want creates and the secret", s.name, res.Changes, res.Outputs)
				}
				if got := stateWriter(t, b, stack); got != prevVersion {
					t.Fatalf("the state of %s was written by %q, want the previous release %s", s.name, got, prevVersion)
				}
			}
			old.Close()

			// The current release opens them: the engine host's ups for one, the CLI's for the other.
			if !tc.keepWorkspace {
				workRoot = t.TempDir()
			}
			cur := map[string]*Manager{"by-host": manager(current, true), "by-cli": manager(current, false)}
			for _, s := range stacks {
				m, stack := cur[s.name], names[s.name]
				preview, err := m.Preview(ctx, stack, upgradeProgram(desired(s.name, "old")), RunOptions{})
				if err != nil {
					t.Fatalf("preview %s with the current release: %v", s.name, err)
				}
				if preview.Changed() || preview.Changes["same"] == 0 {
					t.Fatalf("preview %s with the current release: changes %v, want none", s.name, preview.Changes)
				}
				res, err := m.Up(ctx, stack, upgradeProgram(desired(s.name, "new")), RunOptions{})
				if err != nil {
					t.Fatalf("up %s with the current release: %v", s.name, err)
				}
				if res.Changes["update"] == 0 || res.Changes["create"] != 0 || res.Changes["delete"] != 0 || res.Outputs["token"] != "[secret]" {
					t.Fatalf("up %s with the current release: changes %v, outputs %v; want updates only and the secret", s.name, res.Changes, res.Outputs)
				}
				if got := stateWriter(t, b, stack); got != "v"+PinnedCLIVersion {
					t.Fatalf("the state of %s after the current release's up was written by %q, want v%s", s.name, got, PinnedCLIVersion)
				}
				cmName := desired(s.name, "new").ConfigMapName()
				cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
				if err != nil || cm.Data["greeting"] != "new" {
					t.Fatalf("ConfigMap %s/%s after the current release's up: %v, %v; want greeting new", ns, cmName, cm.Data, err)
				}
				if state := string(b.read(t, stacksPrefix+stack+".json")); strings.Contains(state, "s3cr3t") {
					t.Fatalf("the stored state of %s holds the secret in plain text", s.name)
				}
				again, err := m.Up(ctx, stack, upgradeProgram(desired(s.name, "new")), RunOptions{})
				if err != nil || again.Changed() {
					t.Fatalf("second up %s with the current release: changes %v, %v; want none", s.name, again.Changes, err)
				}

				if _, err := m.Destroy(ctx, stack, RunOptions{}); err != nil {
					t.Fatalf("destroy %s with the current release: %v", s.name, err)
				}
				if exists, err := m.Exists(ctx, stack); err != nil || exists {
					t.Fatalf("after destroy %s: Exists = %v, %v", s.name, exists, err)
				}
				if _, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, s.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("Deployment %s/%s after destroy: %v, want not found", ns, s.name, err)
				}
			}
		})
	}
}
