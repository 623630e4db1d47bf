package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestRequestsShareProcesses: without an engine host, requests that come while a `pulumi
// operator-request` process runs go together to the next one: eight new stacks made at once cost
// two processes (the first request's, then one for the seven that waited), not eight, and each
// stack is made and told so. A caller that gives up while its request waits returns at once with
// its context's error, and the others are answered all the same.
func TestRequestsShareProcesses(t *testing.T) {
	m, _, runs := countingManager(t)
	if _, ok := m.eng.(*cliPerRun); !ok {
		t.Fatalf("the Manager's engine is a %T, want *cliPerRun", m.eng)
	}
	const n = 8
	replies := make([]protocol.Reply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			replies[i], errs[i] = m.eng.request(context.Background(), protocol.Request{Op: protocol.OpInit, Stack: fmt.Sprintf("s%d", i)})
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || replies[i].Code != 0 || !replies[i].Created {
			t.Errorf("init of s%d = %+v, %v; want the stack made", i, replies[i], errs[i])
		}
	}
	procs := runs()
	if len(procs) > 2 || len(procs) == 0 || slices.ContainsFunc(procs, func(r string) bool { return r != protocol.RequestCommand }) {
		t.Fatalf("%d concurrent requests ran %q; want at most 2 `%s` processes", n, procs, protocol.RequestCommand)
	}
	t.Logf("%d concurrent requests: %d processes", n, len(procs))

	// A waiter gives up: one request runs, the next two wait; one of them is cancelled.
	ctx, cancel := context.WithCancel(context.Background())
	var first, kept error
	var keptReply protocol.Reply
	wg.Go(func() { _, first = m.eng.request(context.Background(), protocol.Request{Op: protocol.OpLocks}) })
	waitFor(t, func() bool { c := m.eng.(*cliPerRun); c.mu.Lock(); defer c.mu.Unlock(); return c.serving })
	wg.Go(func() {
		keptReply, kept = m.eng.request(context.Background(), protocol.Request{Op: protocol.OpInit, Stack: "later"})
	})
	done := make(chan error, 1)
	go func() {
		_, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpInit, Stack: "cancelled"})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled waiting request returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled waiting request did not return")
	}
	wg.Wait()
	if first != nil || kept != nil || keptReply.Code != 0 || !keptReply.Created {
		t.Fatalf("the requests beside the cancelled one: %v; %+v, %v; want both answered, the stack made", first, keptReply, kept)
	}
}

// waitFor polls cond every 5 ms for at most 10 s, failing the test when it never holds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10 s")
		}
	}
}

// TestRequestProcessEndsWithItsCallers: a request process whose every caller has gone is
// interrupted, not left to run: here one that would hang for a minute ends within seconds of its
// one caller's deadline, and the next request starts a process of its own.
func TestRequestProcessEndsWithItsCallers(t *testing.T) {
	dir := t.TempDir()
	hang := filepath.Join(dir, "hang")
	// While the file hang exists, the request command hangs (exec: the interrupt reaches sleep).
	m := wrappedManager(t, dir, fmt.Sprintf("case \" $* \" in *\" %s \"*) if [ -e %q ]; then exec sleep 60; fi;; esac", protocol.RequestCommand, hang))
	if err := os.WriteFile(hang, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpLocks}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a request past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	c := m.eng.(*cliPerRun)
	waitFor(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return !c.serving })
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("the request process ran %v after its caller had gone", d)
	}
	if n := m.procs.len(); n != 0 {
		t.Fatalf("%d pulumi processes still run", n)
	}
	if err := os.Remove(hang); err != nil {
		t.Fatal(err)
	}
	if r, err := m.eng.request(context.Background(), protocol.Request{Op: protocol.OpLocks}); err != nil || r.Code != 0 {
		t.Fatalf("the next request = %+v, %v; want answered by a process of its own", r, err)
	}
}

// TestBackgroundRunsNiced: a background up (RunOptions.Background) runs as a pulumi CLI process of
// nice value BackgroundNice, which the provider plugins it starts inherit; a foreground up, and a
// request process, keep the operator's.
func TestBackgroundRunsNiced(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "nice.log")
	// The nice value is set just after the process starts: read it a moment later, then run the
	// CLI in this very process (exec), whose plugins inherit it.
	m := wrappedManager(t, dir, fmt.Sprintf("sleep 0.3\nprintf '%%s %%s\\n' \"$2\" \"$(cut -d' ' -f19 /proc/$$/stat)\" >> %q", log))
	name, _ := m.StackName("ns", "nice")
	if err := os.Remove(log); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background(), name, program("one", 0), RunOptions{}); err != nil {
		t.Fatalf("foreground up: %v", err)
	}
	if _, err := m.Up(context.Background(), name, program("two", 0), RunOptions{Background: true, Refresh: true}); err != nil {
		t.Fatalf("background up: %v", err)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(string(raw)), "\n")
	want := []string{protocol.RequestCommand + " 0", "up 0", "up " + fmt.Sprint(BackgroundNice)}
	if !slices.Equal(got, want) {
		t.Fatalf("processes and their nice values: %q; want %q", got, want)
	}
}

// wrappedManager is a Manager without an engine host on a file backend under dir whose pulumi CLI
// is a shell script that runs before (the script's lines) and then execs the real CLI.
func wrappedManager(t *testing.T, dir, before string) *Manager {
	t.Helper()
	real := testenv.PulumiCLI(t)
	wrapper := filepath.Join(dir, "cli", "bin", "pulumi")
	if err := os.MkdirAll(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\n%s\nexec %q \"$@\"\n", before, real)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(dir, "backend"), WorkRoot: filepath.Join(dir, "ws"),
		PulumiPath: wrapper, PulumiHome: DefaultPulumiHome(real), ClusterName: "test", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUpRefreshSkippedOnNewStack: RunOptions.Refresh is dropped for an up that makes its stack
// (nothing to read) and kept on a stack that exists, for this Manager and for another one that
// has not seen the stack before (another process, or a cluster rebuilt with its backend kept).
func TestUpRefreshSkippedOnNewStack(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "args.log")
	// The CLI's arguments when it runs an up ($1 is the --non-interactive that the Automation
	// API's command runner puts first).
	logUp := fmt.Sprintf("[ \"$2\" = up ] && printf '%%s\\n' \"$*\" >> %q", log)
	m := wrappedManager(t, dir, logUp)
	name, _ := m.StackName("ns", "refresh")
	ctx := context.Background()
	if _, err := m.Up(ctx, name, program("one", 0), RunOptions{Refresh: true}); err != nil {
		t.Fatalf("first up: %v", err)
	}
	if _, err := m.Up(ctx, name, program("two", 0), RunOptions{Refresh: true}); err != nil {
		t.Fatalf("second up: %v", err)
	}
	other := wrappedManager(t, dir, logUp)
	if _, err := other.Up(ctx, name, program("three", 0), RunOptions{Refresh: true}); err != nil {
		t.Fatalf("up by another Manager: %v", err)
	}
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	var got []bool
	for _, l := range lines {
		got = append(got, slices.Contains(strings.Fields(l), "--refresh"))
	}
	if want := []bool{false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("ups with --refresh %v, want %v; their arguments:\n%s", got, want, raw)
	}
}
