package config_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFailuresScript runs hack/failures.sh on the log of a real `go test -v` run (a throwaway
// module with parallel tests, one failing) and checks that it prints the failing test's own
// output, including what it printed outside t.Log, and nothing of the tests that passed; and that
// a dump logged after the error (30 lines from one call site) is folded so that the error stays
// among the messages it prints. The passing test says its line with t.Log, which `go test -v`
// heads with its name: a fmt.Println of a parallel test carries no name and lands in whichever
// test's block is open, so no script can tell whose it is.
func TestFailuresScript(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module failures\n\ngo 1.21\n",
		"x_test.go": `package failures

import (
	"fmt"
	"testing"
)

func TestPasses(t *testing.T) {
	t.Parallel()
	t.Log("passing-test-output")
}

func TestFails(t *testing.T) {
	t.Parallel()
	t.Run("sub", func(t *testing.T) {
		fmt.Println("operator log: the-reason-it-failed")
		t.Error("the-failure")
		for i := 0; i < 30; i++ {
			t.Logf("dump-line-%d", i)
		}
	})
}
`,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-count=1", "-v", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	logText, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("go test of a failing test passed:\n%s", logText)
	}
	log := filepath.Join(dir, "test.log")
	if err := os.WriteFile(log, logText, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, nil, filepath.Join("hack", "failures.sh"), log, filepath.Join(dir, "missing.log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAILED: TestFails", "operator log: the-reason-it-failed", "the-failure", "--- FAIL: TestFails "} {
		if !strings.Contains(out, want) {
			t.Errorf("hack/failures.sh printed no %q:\n%s\n(the log:\n%s)", want, out, logText)
		}
	}
	msgs := out[strings.Index(out, "--- its messages"):strings.Index(out, "--- its output")]
	for _, want := range []string{"the-failure", "dump-line-0", "dump-line-1", "... 28 more from x_test.go:"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("hack/failures.sh's messages have no %q:\n%s", want, msgs)
		}
	}
	if strings.Contains(msgs, "dump-line-2") {
		t.Errorf("hack/failures.sh's messages did not fold the dump's run of lines:\n%s", msgs)
	}
	if failures := out[strings.Index(out, "--- its failures"):strings.Index(out, "--- its messages")]; !strings.Contains(failures, "--- FAIL: TestFails/sub ") {
		t.Errorf("hack/failures.sh did not list the failed subtest:\n%s", failures)
	}
	for _, unwanted := range []string{"passing-test-output", "FAILED: TestPasses"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("hack/failures.sh printed %q of a test that passed:\n%s", unwanted, out)
		}
	}
}
