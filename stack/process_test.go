package stack

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
