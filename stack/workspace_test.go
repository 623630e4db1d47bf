package stack

import (
	"context"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// A second workspace directory on the same backend (the laptop next to the watcher, or a pod
// restarted on an empty volume) reaches the same stack and can decrypt its secrets: the
// passphrase provider's salt travels with the stack's state, not only with the workspace.
func TestFreshWorkspaceReadsSecrets(t *testing.T) {
	m1, backend := newManager(t)
	ctx := context.Background()
	name, _ := m1.StackName("ns", "secrets")
	secret := func(v string) pulumi.RunFunc {
		return func(ctx *pulumi.Context) error {
			ctx.Export("token", pulumi.ToSecret(pulumi.String(v)))
			return nil
		}
	}
	if _, err := m1.Up(ctx, name, secret("first"), RunOptions{}); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + backend, WorkRoot: t.TempDir(),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := m2.Up(ctx, name, secret("second"), RunOptions{})
	if err != nil {
		t.Fatalf("up from a fresh workspace: %v", err)
	}
	if res.Outputs["token"] != "[secret]" {
		t.Fatalf("outputs = %v", res.Outputs)
	}
	// And back in the first workspace, after the second changed the state.
	if _, err := m1.Up(ctx, name, secret("third"), RunOptions{}); err != nil {
		t.Fatalf("up from the first workspace again: %v", err)
	}
	// A wrong passphrase cannot read it: the secret is really encrypted.
	m3, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + backend, WorkRoot: t.TempDir(),
		PulumiPath: testenv.PulumiCLI(t), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m3.Up(ctx, name, secret("fourth"), RunOptions{}); err == nil {
		t.Fatal("a wrong passphrase decrypted the stack's secrets")
	}
}
