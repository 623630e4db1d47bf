package enginehost

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// writeFile writes content to root/rel, making its directories.
func writeFile(t *testing.T, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// backendWithStack is a fresh file:// backend (its directory and URL) holding stack dev of
// project proj, made by the host's init.
func backendWithStack(t *testing.T) (dir, url string) {
	t.Helper()
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir = t.TempDir()
	url = "file://" + dir
	if _, replies, _ := serveCalls(t, url, "proj", `{"id":1,"op":"init","stack":"dev"}`); replies[1].Code != 0 {
		t.Fatalf("init: %+v", replies[1])
	}
	return dir, url
}

// TestLocksAndUnlock: locks reads a stack's lock files from a real file:// backend (held with
// none for no lock; held with the parsed lock and its ID, and held for an empty file being
// written), for an existing stack and for one that does not exist, and every stack's locks with
// their stacks; unlock removes exactly the locks it names, or every lock of the stack when it
// names none, and only that stack's; an unlock without a stack or with a bad lock ID is a bad
// request, never a lock.
func TestLocksAndUnlock(t *testing.T) {
	dir, url := backendWithStack(t)
	_, replies, _ := serveCalls(t, url, "proj", `{"id":1,"op":"locks","stack":"dev"}`)
	if r := replies[1]; r.Code != 0 || r.Held || len(r.Locks) != 0 {
		t.Fatalf("locks of an unlocked stack: %+v; want none held", r)
	}
	locks := filepath.Join(".pulumi", "locks", "organization", "proj")
	writeFile(t, dir, filepath.Join(locks, "dev", "a.json"), `{"pid":42,"username":"u","hostname":"h","timestamp":"2026-11-25T00:00:00Z"}`)
	writeFile(t, dir, filepath.Join(locks, "dev", "a2.json"), `{"pid":43,"username":"u","hostname":"h","timestamp":"2026-11-25T00:00:01Z"}`)
	writeFile(t, dir, filepath.Join(locks, "gone", "b.json"), "") // a lock being written, of a stack that does not exist
	writeFile(t, dir, filepath.Join(locks, "other", "c.json"), `{"pid":1}`)

	_, replies, _ = serveCalls(t, url, "proj",
		`{"id":1,"op":"locks","stack":"dev"}`, `{"id":2,"op":"locks","stack":"gone"}`, `{"id":3,"op":"locks"}`, `{"id":4,"op":"unlock"}`,
		`{"id":5,"op":"unlock","stack":"dev","locks":["../other/c"]}`)
	if r := replies[1]; r.Code != 0 || !r.Held || len(r.Locks) != 2 || r.Locks[0].Pid != 42 || r.Locks[0].Hostname != "h" || r.Locks[0].ID != "a" {
		t.Errorf("locks of dev: %+v; want held, pid 42 on h with ID a first", r)
	}
	if r := replies[2]; r.Code != 0 || !r.Held || len(r.Locks) != 0 {
		t.Errorf("locks of a missing stack with an empty lock file: %+v; want held, none parsed", r)
	}
	var all []string
	for _, l := range replies[3].Locks {
		all = append(all, l.Stack+"/"+l.ID)
	}
	if r := replies[3]; r.Code != 0 || !slices.Equal(all, []string{"dev/a", "dev/a2", "other/c"}) {
		t.Errorf("locks of every stack: %+v (%v); want dev/a, dev/a2, other/c", r, all)
	}
	for id, want := range map[int64]string{4: "want a stack", 5: "lock id"} {
		if r := replies[id]; r.Code == 0 || r.Kind != protocol.KindBadRequest || !strings.Contains(r.Stderr, want) {
			t.Errorf("request %d: %+v; want kind bad-request saying %q", id, r, want)
		}
	}

	_, replies, _ = serveCalls(t, url, "proj", `{"id":1,"op":"unlock","stack":"dev","locks":["a","never-was"]}`)
	if r := replies[1]; r.Code != 0 {
		t.Fatalf("unlock of lock a: %+v", r)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, locks, "dev", "*.json")); len(left) != 1 || filepath.Base(left[0]) != "a2.json" {
		t.Errorf("unlock of lock a left %v; want exactly a2.json", left)
	}

	_, replies, _ = serveCalls(t, url, "proj", `{"id":1,"op":"unlock","stack":"dev"}`, `{"id":2,"op":"unlock","stack":"gone"}`)
	for id, stack := range map[int64]string{1: "dev", 2: "gone"} {
		if r := replies[id]; r.Code != 0 {
			t.Errorf("unlock %s: %+v; want success", stack, r)
		}
		if left, _ := filepath.Glob(filepath.Join(dir, locks, stack, "*.json")); len(left) != 0 {
			t.Errorf("unlock %s left %v", stack, left)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, locks, "other", "c.json")); err != nil {
		t.Errorf("unlock removed another stack's lock: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".pulumi", "stacks", "proj", "gone.json")); err == nil {
		t.Error("unlock of a missing stack created it")
	}
}

// TestUnlockRepairsTornSidecar: a pulumi process killed while gocloud's fileblob rewrote the
// sidecar of a stack's checkpoint leaves it empty, and the stack cannot be read ("EOF"); unlock
// removes the torn sidecar (Repaired names it) and the lock, and the stack reads again, its
// checkpoint untouched.
func TestUnlockRepairsTornSidecar(t *testing.T) {
	dir, url := backendWithStack(t)
	checkpoint := filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json")
	before, err := os.ReadFile(checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	sidecar := checkpoint + ".attrs"
	if err := os.Truncate(sidecar, 0); err != nil {
		t.Fatalf("the checkpoint's sidecar (from gocloud's fileblob): %v", err)
	}
	writeFile(t, dir, filepath.Join(".pulumi", "locks", "organization", "proj", "dev", "a.json"), `{"pid":42}`)
	if _, replies, _ := serveCalls(t, url, "proj", `{"id":1,"op":"init","stack":"dev"}`); replies[1].Code == 0 || !strings.Contains(replies[1].Stderr, "EOF") {
		t.Fatalf("init with a torn sidecar: %+v; want the EOF failure this test is about", replies[1])
	}
	_, replies, _ := serveCalls(t, url, "proj", `{"id":1,"op":"unlock","stack":"dev"}`)
	if r := replies[1]; r.Code != 0 || !slices.Equal(r.Repaired, []string{sidecar}) {
		t.Fatalf("unlock: %+v; want success repairing %s", r, sidecar)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".pulumi", "locks", "organization", "proj", "dev", "*.json")); len(left) != 0 {
		t.Errorf("unlock left %v", left)
	}
	_, replies, _ = serveCalls(t, url, "proj", `{"id":2,"op":"init","stack":"dev"}`)
	if r := replies[2]; r.Code != 0 || r.Created {
		t.Fatalf("init after unlock: %+v; want the stack found", r)
	}
	if after, _ := os.ReadFile(checkpoint); string(after) != string(before) {
		t.Error("the checkpoint changed")
	}
}

// TestUnlockFailure: a metadata sidecar that cannot be read (a directory where fileblob keeps a
// file) fails the unlock before any lock is removed, with kind failed (never locked) and a
// message naming the stack; the lock stays.
func TestUnlockFailure(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	lock := writeFile(t, dir, filepath.Join(".pulumi", "locks", "organization", "proj", "dev", "a.json"), `{"pid":42}`)
	if err := os.MkdirAll(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json.attrs"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, replies, _ := serveCalls(t, "file://"+dir, "proj", `{"id":1,"op":"unlock","stack":"dev"}`)
	if r := replies[1]; r.Code == 0 || r.Kind != protocol.KindFailed || !strings.Contains(r.Stderr, "metadata files of stack dev") {
		t.Fatalf("unlock with an unreadable sidecar: %+v; want kind failed naming the stack", r)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Errorf("the lock was removed although the repair failed: %v", err)
	}
}
