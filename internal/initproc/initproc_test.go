package initproc

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// testRole is how the test binary knows, when run again by TestInitReapsOrphans, what to be.
const testRole = "INITPROC_TEST_ROLE"

// TestMain plays the operator of TestInitReapsOrphans: as PID 1 it becomes the init (Run), and
// as the init's child it leaves an orphan behind and reports whether that orphan was reaped.
func TestMain(m *testing.M) {
	if os.Getenv(testRole) == "" {
		os.Exit(m.Run())
	}
	Run() // PID 1: never returns; the child goes on
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
