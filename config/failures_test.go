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
// output, including what it printed outside t.Log, and nothing of the tests that passed.
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
	fmt.Println("passing-test-output")
}

func TestFails(t *testing.T) {
	t.Parallel()
	t.Run("sub", func(t *testing.T) {
		fmt.Println("operator log: the-reason-it-failed")
		t.Error("the-failure")
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
	for _, unwanted := range []string{"passing-test-output", "FAILED: TestPasses"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("hack/failures.sh printed %q of a test that passed:\n%s", unwanted, out)
		}
	}
}
