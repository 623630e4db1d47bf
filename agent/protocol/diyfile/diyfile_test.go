package diyfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// writeFile writes content to root/rel, making its directories, and returns its path.
func writeFile(t *testing.T, root, rel, content string) string {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// RepairSidecars removes exactly the torn (empty or not a JSON object) metadata sidecars of one
// stack on a file backend, keeps whole ones and other stacks' files, and does nothing on other
// backends.
func TestRepairSidecars(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, ".pulumi")
	whole := `{"user.content_type":"application/octet-stream"}` + "\n"
	torn := []string{
		writeFile(t, root, "stacks/proj/c.ns.a.json.attrs", ""),
		writeFile(t, root, "stacks/proj/c.ns.a.json.bak.attrs", `{"user.content_ty`),
		writeFile(t, root, "locks/organization/proj/c.ns.a/1.json.attrs", "null"),
		writeFile(t, root, "history/proj/c.ns.a/c.ns.a-1.checkpoint.json.attrs", "[]"),
		writeFile(t, root, "backups/proj/c.ns.a/c.ns.a.1.json.attrs", ""),
	}
	kept := []string{
		writeFile(t, root, "stacks/proj/c.ns.a.json", ""), // a checkpoint itself is never touched
		writeFile(t, root, "stacks/proj/c.ns.a.json.gz.attrs", whole),
		writeFile(t, root, "stacks/proj/c.ns.b.json.attrs", ""), // another stack
		writeFile(t, root, "locks/organization/proj/c.ns.a/2.json.attrs", whole),
		writeFile(t, root, "locks/organization/proj/c.ns.a/1.json", ""),
		writeFile(t, root, "stacks/other/c.ns.a.json.attrs", ""), // another project
	}
	removed, err := RepairSidecars("file://"+dir, "proj", "c.ns.a")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	want := slices.Clone(torn)
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, f := range torn {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there (%v)", f, err)
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s was removed: %v", f, err)
		}
	}
	if removed, err := RepairSidecars("postgres://u@127.0.0.1/db", "proj", "c.ns.b"); removed != nil || err != nil {
		t.Errorf("postgres backend: %v, %v; want nothing", removed, err)
	}

	// A sidecar that cannot be read (a directory in its place) is reported, not skipped.
	if err := os.MkdirAll(filepath.Join(root, "stacks/proj/c.ns.c.json.attrs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := RepairSidecars("file://"+dir, "proj", "c.ns.c"); err == nil {
		t.Error("a sidecar that could not be read was not reported")
	}
}
