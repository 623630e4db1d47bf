package initproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testRole is how the test binary knows, when run again by TestInitReapsOrphans, what to be.
const testRole = "INITPROC_TEST_ROLE"

// TestMain plays the operator of TestInitReapsOrphans and TestInitSignals: as PID 1 it becomes
// the init (Run), and as the init's child it leaves an orphan behind and reports whether that
// orphan was reaped, or reports the signal it got (signalsChild).
func TestMain(m *testing.M) {
	if os.Getenv(testRole) == "" {
		os.Exit(m.Run())
	}
	Run() // PID 1: never returns; the child goes on
	if os.Getenv(testRole) == "signals" {
		signalsChild()
	}
	// The child: start a shell that starts a sleep in the background and exits, so the sleep
	// is handed to PID 1; it ends after 0.2 s and must not stay a zombie.
	if err := exec.Command("sh", "-c", "sleep 0.2 &").Run(); err != nil {
		os.Exit(3)
	}
	time.Sleep(time.Second)
	if zombies() > 0 {
		os.Exit(4)
	}
	os.Exit(7) // the init must exit with this
}

// signalsChild is the init's child of TestInitSignals: it handles only the forwarded signals
// (to see them arrive; the operator handles SIGTERM and SIGINT alone), says "ready" on standard
// output, and exits with 10 plus the number of the first signal it gets. Any other signal has its
// default action, as on the operator: SIGHUP kills it, SIGTSTP stops it.
func signalsChild() {
	got := make(chan os.Signal, 1)
	signal.Notify(got, forwarded...)
	fmt.Println("ready")
	os.Exit(10 + int((<-got).(syscall.Signal)))
}

// zombies counts the zombie processes of this PID namespace.
func zombies() int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if _, after, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(after, "Z") {
			n++
		}
	}
	return n
}

// As PID 1 of a PID namespace of its own (unshare, root only), the operator runs itself as a
// child, reaps the orphans handed to it, and exits with its child's exit code.
func TestInitReapsOrphans(t *testing.T) {
	cmd := inPIDNamespace(t, testRole+"=operator")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Fatalf("the init exited 0, want its child's 7\n%s", out)
	case !errors.As(err, &exit):
		t.Fatalf("run: %v\n%s", err, out)
	case exit.ExitCode() == 4:
		t.Fatalf("an orphan stayed a zombie under the init\n%s", out)
	case exit.ExitCode() != 7:
		t.Fatalf("the init exited %d, want its child's 7\n%s", exit.ExitCode(), out)
	}
}

// Without the init, the same orphan stays a zombie: the check above can fail.
func TestOrphanIsAZombieWithoutInit(t *testing.T) {
	cmd := inPIDNamespace(t, testRole+"=operator", ChildEnv+"=1") // never becomes the init
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 {
		t.Fatalf("without the init: %v, want exit 4 (a zombie left)", err)
	}
}

// inPIDNamespace is this test binary as PID 1 of a PID namespace of its own (unshare, root
// only), with env added; it says SKIP where that cannot be made.
func inPIDNamespace(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIP: needs root to make a PID namespace (unshare --pid)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("SKIP: needs unshare(1) (util-linux)")
	}
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", os.Args[0])
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// TestInitSignals: as PID 1, the init passes the forwarded signals on to its child and ignores
// the others, which would kill (SIGHUP) or stop (SIGTSTP, SIGTTIN, SIGTTOU) a Go program without
// a handler: after one of those the child still runs, and a SIGTERM still ends it.
func TestInitSignals(t *testing.T) {
	tests := map[string]struct {
		sig       syscall.Signal
		forwarded bool
	}{
		"SIGTERM":  {syscall.SIGTERM, true},
		"SIGINT":   {syscall.SIGINT, true},
		"SIGQUIT":  {syscall.SIGQUIT, true},
		"SIGUSR1":  {syscall.SIGUSR1, true},
		"SIGUSR2":  {syscall.SIGUSR2, true},
		"SIGWINCH": {syscall.SIGWINCH, true},
		"SIGHUP":   {syscall.SIGHUP, false},
		"SIGTSTP":  {syscall.SIGTSTP, false},
		"SIGTTIN":  {syscall.SIGTTIN, false},
		"SIGTTOU":  {syscall.SIGTTOU, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cmd := inPIDNamespace(t, testRole+"=signals")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan int, 1)
			ready := make(chan bool, 1)
			go func() {
				line, _ := bufio.NewReader(stdout).ReadString('\n')
				ready <- line == "ready\n"
				_, _ = io.Copy(io.Discard, stdout)
				err := cmd.Wait()
				var exit *exec.ExitError
				switch {
				case err == nil:
					exited <- 0
				case errors.As(err, &exit):
					exited <- exit.ExitCode()
				default:
					exited <- -1
				}
			}()
			if !<-ready {
				t.Fatalf("the init's child never said ready; stderr:\n%s", stderr.String())
			}
			// unshare --fork's child is the namespace's PID 1, the init.
			init := childOf(t, cmd.Process.Pid)
			op := childOf(t, init)
			if err := syscall.Kill(init, tc.sig); err != nil {
				t.Fatal(err)
			}
			want := 10 + int(syscall.SIGTERM) // the SIGTERM below
			if tc.forwarded {
				want = 10 + int(tc.sig)
			} else {
				time.Sleep(300 * time.Millisecond)
				if state := procState(op); state == "T" {
					t.Errorf("the child was stopped by %s sent to the init", name)
					_ = syscall.Kill(op, syscall.SIGCONT)
				}
			}
			if !tc.forwarded {
				// Only now: the runtime hands a process its pending signals in the order of their
				// numbers, not of their sending, so a SIGTERM sent with a forwarded signal of a
				// higher number could reach the child first.
				_ = syscall.Kill(init, syscall.SIGTERM)
			}
			select {
			case code := <-exited:
				if code != want {
					t.Errorf("after %s and SIGTERM to the init it exited %d, want %d (the child's 10 + %d); stderr:\n%s",
						name, code, want, want-10, stderr.String())
				}
			case <-time.After(10 * time.Second):
				_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
				_ = syscall.Kill(init, syscall.SIGKILL)
				t.Fatalf("the init did not exit within 10 s of %s and SIGTERM (child state %q)", name, procState(op))
			}
		})
	}
}

// childOf is the one child of process pid (the children lists of its threads in procfs: a Go
// program starts a child from any of its threads), waiting for it to appear.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var b []byte
		lists, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
		for _, l := range lists {
			c, _ := os.ReadFile(l)
			b = append(b, c...)
		}
		if f := strings.Fields(string(b)); len(f) == 1 {
			child, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatal(err)
			}
			return child
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has no single child: %q", pid, b)
		}
	}
}

// procState is process pid's state letter ("R", "S", "T" for stopped, "Z"), "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	_, after, _ := strings.Cut(string(b), ") ")
	state, _, _ := strings.Cut(after, " ")
	return state
}
