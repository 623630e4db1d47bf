package enginehost

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// A prune request keeps the newest updates of the stack in its history (both files of an
// update) and backups, and touches no other stack and no other file.
func TestPrune(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	hist := filepath.Join(dir, ".pulumi", "history", "proj", "dev")
	back := filepath.Join(dir, ".pulumi", "backups", "proj", "dev")
	other := filepath.Join(dir, ".pulumi", "history", "proj", "devx")
	for _, d := range []string{hist, back, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(d, name string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for i := int64(1); i <= 5; i++ {
		ts := 1700000000000000000 + i
		write(hist, fmt.Sprintf("dev-%d.history.json", ts))
		write(hist, fmt.Sprintf("dev-%d.checkpoint.json", ts))
		write(back, fmt.Sprintf("dev.%d.json", ts))
		write(other, fmt.Sprintf("devx-%d.history.json", ts))
	}
	write(hist, "notes.txt")
	code, replies, stderr := serveCalls(t, "file://"+dir, "proj",
		`{"id":1,"op":"prune","stack":"dev","keep":2}`,
		`{"id":2,"op":"prune","stack":"dev"}`,
	)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r := replies[1]; r.Code != 0 || r.Pruned != 9 {
		t.Fatalf("prune reply %+v, want 9 files deleted (3 updates of 2 history files and 3 backups)", r)
	}
	if r := replies[2]; r.Code != 1 || !strings.Contains(r.Stderr, "bad prune request") {
		t.Errorf("prune without keep: %+v, want a bad request", r)
	}
	names := func(d string) []string {
		var out []string
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".attrs") {
				out = append(out, e.Name())
			}
		}
		slices.Sort(out)
		return out
	}
	if got, want := names(hist), []string{"dev-1700000000000000004.checkpoint.json", "dev-1700000000000000004.history.json",
		"dev-1700000000000000005.checkpoint.json", "dev-1700000000000000005.history.json", "notes.txt"}; !slices.Equal(got, want) {
		t.Errorf("history left %v, want %v", got, want)
	}
	if got := names(back); len(got) != 2 || got[1] != "dev.1700000000000000005.json" {
		t.Errorf("backups left %v, want the 2 newest", got)
	}
	if got := names(other); len(got) != 5 {
		t.Errorf("another stack's history: %v, want untouched", got)
	}
}

func TestUpdateTime(t *testing.T) {
	for name, want := range map[string]int64{
		"dev-17.history.json":       17,
		"dev-17.checkpoint.json.gz": 17,
		"dev.18.json":               18,
		"dev.18.json.zst":           18,
		"devx-19.history.json":      -1,
		"dev.json":                  -1,
		"dev-x.history.json":        -1,
	} {
		got, ok := updateTime(name, "dev")
		if (want < 0) == ok || (ok && got != want) {
			t.Errorf("updateTime(%q) = %d, %v; want %d", name, got, ok, want)
		}
	}
}

// pruneFixture writes, under a file backend in a new directory, count updates of stack "dev" of
// project "proj" as the DIY backend names them (history record and checkpoint, and a backup),
// with update times base+1 ... base+count, and returns the directory. mtime, when not nil, is
// the modification time of update i's files.
func pruneFixture(t *testing.T, count int, mtime func(i int) time.Time) string {
	t.Helper()
	dir := t.TempDir()
	hist := filepath.Join(dir, ".pulumi", "history", "proj", "dev")
	back := filepath.Join(dir, ".pulumi", "backups", "proj", "dev")
	for _, d := range []string{hist, back} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= count; i++ {
		ts := 1700000000000000000 + int64(i)
		for _, p := range []string{
			filepath.Join(hist, fmt.Sprintf("dev-%d.history.json", ts)),
			filepath.Join(hist, fmt.Sprintf("dev-%d.checkpoint.json", ts)),
			filepath.Join(back, fmt.Sprintf("dev.%d.json", ts)),
		} {
			if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
				t.Fatal(err)
			}
			if mtime != nil {
				if err := os.Chtimes(p, mtime(i), mtime(i)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return dir
}

// fileNames lists the files under dir (relative, sorted), without the file backend's .attrs
// sidecars.
func fileNames(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".attrs") {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestPruneIgnoresModTimes: the newest updates are those whose names carry the latest update
// time (Pulumi's own order), whatever the files' modification times say: here the oldest
// updates' files were modified last (a backend copied back in another order, say).
func TestPruneIgnoresModTimes(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	// Update 1's files get the newest modification time, update 6's the oldest.
	now := time.Now()
	dir := pruneFixture(t, 6, func(i int) time.Time { return now.Add(-time.Duration(i) * time.Hour) })
	code, replies, stderr := serveCalls(t, "file://"+dir, "proj", `{"id":1,"op":"prune","stack":"dev","keep":2}`)
	if code != 0 || replies[1].Code != 0 || replies[1].Pruned != 12 {
		t.Fatalf("exit %d, reply %+v, stderr %q; want 12 files deleted", code, replies[1], stderr)
	}
	want := []string{
		filepath.Join(".pulumi", "backups", "proj", "dev", "dev.1700000000000000005.json"),
		filepath.Join(".pulumi", "backups", "proj", "dev", "dev.1700000000000000006.json"),
		filepath.Join(".pulumi", "history", "proj", "dev", "dev-1700000000000000005.checkpoint.json"),
		filepath.Join(".pulumi", "history", "proj", "dev", "dev-1700000000000000005.history.json"),
		filepath.Join(".pulumi", "history", "proj", "dev", "dev-1700000000000000006.checkpoint.json"),
		filepath.Join(".pulumi", "history", "proj", "dev", "dev-1700000000000000006.history.json"),
	}
	if got := fileNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("left %v, want the two updates with the latest times in their names: %v", got, want)
	}
}
