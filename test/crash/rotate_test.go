package crash

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestPassphraseRotation rotates the passphrase of 20 stacks with the operator serving, and
// kills the operator in the middle: 20 objects made under passphrase A; the operator restarted
// with B as its passphrase and A as --previous-passphrase-file; `pulumi-operator
// rotate-passphrase` (its own state directory, the same backend, as from a laptop) asks it to
// reconcile every object whose stack still needs A and waits. After some stacks are re-encrypted
// the operator is SIGKILLed (every process of it), an object is changed, and the operator comes
// back: the command finishes (exit 0, every stack "current"), every object is Ready with the
// change applied, no lock is left, and an operator with B alone (no previous passphrase) then
// updates every stack; `rotate-passphrase --check` with B alone reports all current.
func TestPassphraseRotation(t *testing.T) {
	requirePlugin(t)
	const n = 20
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	dir := t.TempDir()
	phrase := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldFile, newFile := phrase("old", "passphrase-A-"+randomHex(6)), phrase("new", "passphrase-B-"+randomHex(6))
	stateDir := filepath.Join(dir, "state")
	backendURL := "file://" + filepath.Join(stateDir, "backend")
	const cluster = "rot"
	engineHost := testenv.EngineHost(t)
	operatorWith := func(name string, env map[string]string) *operator {
		return newOperator(t, operatorConfig{name: name, kubeconfig: c.Kubeconfig, stateDir: stateDir, cluster: cluster,
			namespace: ns, env: env, engineHost: engineHost})
	}

	both := map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": newFile, "PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE": oldFile}
	// Whatever step the test ends at, an operator that opens every stack destroys them; the
	// others are stopped by then (cleanups run last-registered first).
	cleaner := operatorWith("cleanup", both)
	t.Cleanup(func() {
		cleaner.start()
		deleteAllAndWait(t, c, ns, 5*time.Minute)
	})

	before := operatorWith("passphrase-A", map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": oldFile})
	before.start()
	live := map[string]spec{}
	for i := range n {
		name := fmt.Sprintf("rot-%02d", i)
		live[name] = spec{replicas: 1, data: map[string]string{"hostports": "a,8080\n"}}
		if err := createCR(ctx, c, ns, name, live[name], nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d objects Ready under passphrase A in %s", n, waitConverged(t, c, ns, live, nil, 5*time.Minute).Round(time.Second))
	before.stop()

	rotating := operatorWith("passphrase-B-previous-A", both)
	rotating.start()

	// The command, as from a laptop: a state directory of its own, the backend by URL.
	rotate := func(env map[string]string, args ...string) *exec.Cmd {
		cmd := exec.Command(operatorBinary(t), append([]string{"--kubeconfig", c.Kubeconfig, "--state-dir", filepath.Join(dir, "cli-state"),
			"--cluster-name", cluster, "--pulumi", testenv.PulumiCLI(t), "--project-file", filepath.Join(testenv.RepoRoot(), "Pulumi.yaml"),
			"--backend-url", backendURL, "rotate-passphrase"}, args...)...)
		cmd.Env = append(withoutPassphrase(os.Environ()), "PULUMI_CONFIG_PASSPHRASE_FILE="+env["PULUMI_CONFIG_PASSPHRASE_FILE"])
		if p := env["PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE"]; p != "" {
			cmd.Env = append(cmd.Env, "PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE="+p)
		}
		return cmd
	}
	start := time.Now()
	var cmdOut bytes.Buffer
	cmd := rotate(both, "--wait", "8m")
	cmd.Stdout, cmd.Stderr = &cmdOut, &cmdOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// Kill the operator once some stacks are re-encrypted, not all.
	const reencrypted = "re-encrypted the stack's secrets"
	deadline := time.Now().Add(5 * time.Minute)
	for countLines(rotating.logs.String(), reencrypted) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the operator re-encrypted %d stacks in 5 minutes; command output:\n%s", countLines(rotating.logs.String(), reencrypted), cmdOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	killedAfter := countLines(rotating.logs.String(), reencrypted)
	killedAt := time.Since(start)
	rotating.kill()
	changed := spec{replicas: 2, data: map[string]string{"hostports": "b,8080\n"}}
	live["rot-19"] = changed
	if err := patchCR(ctx, c, ns, "rot-19", changed); err != nil {
		t.Fatal(err)
	}
	rotating.start()

	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("rotate-passphrase: %v\n%s", err, cmdOut.String())
		}
	case <-time.After(9 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("rotate-passphrase did not end within 9 minutes:\n%s", cmdOut.String())
	}
	took := time.Since(start)
	if want := fmt.Sprintf("every stack (%d) opens with the current passphrase", n); !strings.Contains(cmdOut.String(), want) {
		t.Errorf("rotate-passphrase output lacks %q:\n%s", want, cmdOut.String())
	}
	converged := waitConverged(t, c, ns, live, nil, 5*time.Minute)
	t.Logf("rotation of %d stacks: the operator killed after %d re-encrypted (%s in), the command done in %s, every object Ready %s later",
		n, killedAfter, killedAt.Round(time.Second), took.Round(time.Second), converged.Round(time.Second))
	if locks := backendLocks(t, backendURL, cluster, ns); len(locks) > 0 {
		t.Errorf("locks left behind: %v", locks)
	}
	rotating.stop()

	// B alone opens every stack: an operator without the previous passphrase updates them all.
	after := operatorWith("passphrase-B", map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": newFile})
	after.start()
	for name := range live {
		s := spec{replicas: 1, data: map[string]string{"hostports": "c,8080\n"}}
		live[name] = s
		if err := patchCR(ctx, c, ns, name, s); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("an operator with passphrase B alone updated all %d stacks in %s", n, waitConverged(t, c, ns, live, nil, 5*time.Minute).Round(time.Second))
	if n := countLines(after.logs.String(), "incorrect passphrase"); n > 0 {
		t.Errorf("the operator with passphrase B alone logged %d incorrect-passphrase lines", n)
	}
	check := rotate(map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": newFile}, "--check")
	out, err := check.CombinedOutput()
	if err != nil || strings.Count(string(out), ": current\n") != n || strings.Contains(string(out), ": previous\n") {
		t.Errorf("rotate-passphrase --check with B alone: %v\n%s", err, out)
	}
}

// withoutPassphrase is env without the passphrase variables, which each run sets itself.
func withoutPassphrase(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PULUMI_CONFIG_PASSPHRASE") && !strings.HasPrefix(kv, "PULUMI_OPERATOR_PREVIOUS_PASSPHRASE") &&
			!strings.HasPrefix(kv, "PULUMI_BACKEND_URL=") {
			out = append(out, kv)
		}
	}
	return out
}
