package stack

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/core/v1"
	metav1 "github.com/pulumi/pulumi-kubernetes/sdk/v4/go/kubernetes/meta/v1"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// killGroup ends a process and everything below it, also what put itself in a process group of
// its own (as pulumi does with its provider plugins), so that nothing of a fenced run lives on.
func TestKillGroupKillsTheTree(t *testing.T) {
	// sh starts a child in a new session (its own group), then waits.
	cmd := exec.Command("sh", "-c", "setsid sleep 300 & wait")
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0; time.Sleep(20 * time.Millisecond) {
		if below := descendants(cmd.Process.Pid); len(below) > 0 {
			child = below[len(below)-1]
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never started")
		}
	}
	killGroup(cmd.Process)
	_ = cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); processAlive(child); time.Sleep(20 * time.Millisecond) {
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat"); strings.Contains(string(b), ") Z ") {
			break // killed, waiting to be reaped by init
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d in its own session survived killGroup of its parent", child)
		}
	}
}

// TestRunLeavesNothingBehind: whatever a CLI run started is dead when Run returns, however the run
// ended: it exited, it exited on its cancel, it ignored its cancel and was killed after the
// delay, or it was killed from outside. The "CLI" is a shell script that starts a background
// sleep: a real CLI's provider plugin cannot be made to outlive a run that exits normally (a
// pulumi process ends its plugins itself), and the script makes each of the four ends on demand;
// TestCancelledUpKillsItsPlugin has the real CLI and plugin.
func TestRunLeavesNothingBehind(t *testing.T) {
	tests := map[string]struct {
		script string // after it has written the sleep's pid
		end    func(cancel func(), cli int)
	}{
		"exits":               {script: "exit 0", end: func(func(), int) {}},
		"exits on its cancel": {script: "trap 'exit 130' INT\nwhile :; do sleep 0.05; done", end: func(cancel func(), _ int) { cancel() }},
		"ignores its cancel":  {script: "trap '' INT\nwhile :; do sleep 0.05; done", end: func(cancel func(), _ int) { cancel() }},
		"killed from outside": {script: "while :; do sleep 0.05; done", end: func(_ func(), cli int) { _ = syscall.Kill(cli, syscall.SIGKILL) }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "child.pid")
			script := filepath.Join(dir, "pulumi")
			body := fmt.Sprintf("#!/bin/sh\nsleep 300 &\necho $! > %s.tmp && mv %s.tmp %s\n%s\n", pidFile, pidFile, pidFile, tc.script)
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			procs := &processSet{}
			c := &trackedCommand{path: script, procs: procs, cancelDelay: 500 * time.Millisecond}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _, _, _ = c.Run(ctx, dir, nil, nil, nil, nil, "up")
			}()
			var child int
			for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(10 * time.Millisecond) {
				if b, err := os.ReadFile(pidFile); err == nil {
					child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				}
				if time.Now().After(deadline) {
					t.Fatal("the script never started its child")
				}
			}
			t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
			var cli int
			procs.mu.Lock()
			for p := range procs.m {
				cli = p.Pid
			}
			procs.mu.Unlock()
			if cli != 0 {
				tc.end(cancel, cli)
			}
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Run did not return")
			}
			if state := processState(child); state != "" && state != "Z" {
				t.Errorf("the run's child %d is still running (state %s) after Run returned", child, state)
			}
		})
	}
}

// processState is process pid's state letter ("R", "S", "T", "Z" for a zombie), "" when it is
// gone.
func processState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	_, after, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(after, " ")
	return state
}

// configMapProgram creates one ConfigMap, name, in namespace ns, with the cluster the
// Kubernetes provider finds in KUBECONFIG.
func configMapProgram(ns, name string) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		_, err := corev1.NewConfigMap(ctx, name, &corev1.ConfigMapArgs{
			Metadata: &metav1.ObjectMetaArgs{Name: pulumi.String(name), Namespace: pulumi.String(ns)},
			Data:     pulumi.StringMap{"k": pulumi.String("v")},
		})
		return err
	}
}

// TestEndedUpKillsItsPlugin: an up whose provider plugin is busy (the API server's answer to its
// write is held back) leaves no plugin behind, whether the up is cancelled (the CLI cancels the
// plugin's work and ends it itself) or its CLI is killed (SIGKILL, as the OOM killer does): when
// Run returns, the Kubernetes provider plugin that CLI run started is dead. The real CLI and
// plugin on the local cluster.
func TestEndedUpKillsItsPlugin(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	tests := map[string]func(cancel func(), cli *os.Process){
		"cancelled":  func(cancel func(), _ *os.Process) { cancel() },
		"CLI killed": func(_ func(), cli *os.Process) { _ = cli.Kill() },
	}
	for name, end := range tests {
		t.Run(name, func(t *testing.T) {
			ns := c.Namespace(t)
			proxy := c.HoldingProxy(t, func(r *http.Request) bool {
				return r.Method != http.MethodGet && strings.Contains(r.URL.Path, "/namespaces/"+ns+"/configmaps")
			})
			m, _ := newManager(t)
			m.env["KUBECONFIG"] = proxy.Kubeconfig
			// Should the CLI wait for the held write after its cancel, the kill comes this long after it.
			m.cmd.(*trackedCommand).cancelDelay = 2 * time.Second
			stack, _ := m.StackName(ns, "plugin")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := m.Up(ctx, stack, configMapProgram(ns, "held"), RunOptions{})
				done <- err
			}()
			deadline := time.Now().Add(2 * time.Minute)
			for proxy.Held() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the ConfigMap's write never reached the API server")
				}
				time.Sleep(50 * time.Millisecond)
			}
			var cli *os.Process
			var plugins []int
			m.procs.mu.Lock()
			for p := range m.procs.m {
				cli = p
				for _, pid := range descendants(p.Pid) {
					if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err == nil && strings.HasPrefix(filepath.Base(exe), "pulumi-resource-kubernetes") {
						plugins = append(plugins, pid)
					}
				}
			}
			m.procs.mu.Unlock()
			if len(plugins) == 0 {
				t.Fatal("no Kubernetes provider plugin runs below the CLI while its write is held")
			}
			t.Cleanup(func() {
				for _, pid := range plugins {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			end(cancel, cli)
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("the up succeeded")
				}
			case <-time.After(time.Minute):
				t.Fatal("the up did not return within a minute")
			}
			for _, pid := range plugins {
				if state := processState(pid); state != "" && state != "Z" {
					t.Errorf("the provider plugin %d still runs (state %s) after the up returned", pid, state)
				}
			}
		})
	}
}
