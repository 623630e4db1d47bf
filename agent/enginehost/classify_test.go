package enginehost

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// TestLockedByAnother: a request on a stack whose lock another process holds (a lock file of
// pid 1 on another host) fails with kind locked and that lock, read from the backend's lock
// file, not from the text; init creates nothing.
func TestLockedByAnother(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	lockDir := filepath.Join(dir, ".pulumi", "locks", "organization", "proj", "dev")
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := `{"pid":1,"username":"someone","hostname":"elsewhere","timestamp":"2026-11-25T00:00:00Z"}`
	if err := os.WriteFile(filepath.Join(lockDir, "other.json"), []byte(lock), 0o644); err != nil {
		t.Fatal(err)
	}
	_, replies, _ := serveCalls(t, "file://"+dir, "proj", `{"id":1,"op":"init","stack":"dev"}`)
	r := replies[1]
	if r.Code == 0 || r.Kind != protocol.KindLocked || len(r.Locks) != 1 ||
		r.Locks[0].Pid != 1 || r.Locks[0].Hostname != "elsewhere" || r.Locks[0].Username != "someone" ||
		r.Locks[0].Timestamp.UTC().Format("2006-01-02T15:04:05Z") != "2026-11-25T00:00:00Z" {
		t.Fatalf("init of a locked stack: %+v; want kind locked naming someone@elsewhere pid 1", r)
	}
	if _, err := os.Stat(filepath.Join(dir, ".pulumi", "stacks", "proj", "dev.json")); err == nil {
		t.Error("a locked stack was created")
	}
}

// TestBackendUnreachable: a backend that cannot be opened (a PostgreSQL server nobody listens
// for, on a port of this machine) is not an error at start: each request is answered with kind
// backend-unreachable, and the host goes on serving.
func TestBackendUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nobody listens there now
	url := "postgres://u@" + addr + "/db?sslmode=disable&connect_timeout=2"
	code, replies, _ := serveCalls(t, url, "proj", `{"id":1,"op":"init","stack":"dev"}`, `{"id":2,"op":"init","stack":"dev"}`)
	if code != 0 {
		t.Fatalf("exit %d, want 0 (the host serves while the backend is down)", code)
	}
	for id := int64(1); id <= 2; id++ {
		if r := replies[id]; r.Code == 0 || r.Kind != protocol.KindBackendUnreachable || !strings.HasPrefix(r.Stderr, "error: ") {
			t.Errorf("reply %d: %+v; want kind %s and an error line", id, r, protocol.KindBackendUnreachable)
		}
	}
}

// TestPluginMissingFormat pins pluginMissing to the text pkg/v3's own MissingError makes, with
// and without a version: if a new pinned version words it otherwise, this fails.
func TestPluginMissingFormat(t *testing.T) {
	v := semver.MustParse("4.33.0")
	for _, spec := range []workspace.PluginDescriptor{
		{Kind: apitype.ResourcePlugin, Name: "kubernetes", Version: &v},
		{Kind: apitype.ResourcePlugin, Name: "kubernetes"},
	} {
		msg := "Could not load plugin: " + workspace.NewMissingError(spec, true).Error()
		if !pluginMissing(msg) {
			t.Errorf("pluginMissing(%q) = false", msg)
		}
	}
	if pluginMissing("error: the program failed") {
		t.Error("pluginMissing of an unrelated error = true")
	}
}

// TestDiagnose: the diagnosis of a CLI run's failure, through the Engine service: a lock file of the stack is a lock's wait naming it; with a step run,
// or with none held, a plain failure; a stack the backend does not hold is stack-missing. A wrong
// request is a bad request with its reason, and touches nothing.
func TestDiagnose(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	dir := t.TempDir()
	for rel, content := range map[string]string{
		"stacks/proj/dev.json":                   "{}",
		"stacks/proj/free.json":                  "{}",
		"locks/organization/proj/dev/other.json": `{"pid":1,"username":"someone","hostname":"elsewhere","timestamp":"2026-11-25T00:00:00Z"}`,
	} {
		p := filepath.Join(dir, ".pulumi", filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	url := "file://" + dir
	_, replies, _ := serveCalls(t, url, "proj",
		`{"id":1,"op":"diagnose","stack":"dev"}`,
		`{"id":2,"op":"diagnose","stack":"dev","steps":true}`,
		`{"id":3,"op":"diagnose","stack":"free"}`,
		`{"id":4,"op":"diagnose","stack":"gone"}`,
		`{"id":5,"op":"diagnose","stack":"a/b/c/d"}`)
	want := map[int64]protocol.ErrorKind{1: protocol.KindLocked, 2: protocol.KindFailed, 3: protocol.KindFailed, 4: protocol.KindStackMissing}
	for id, kind := range want {
		if r := replies[id]; r.Code != 0 || r.Kind != kind {
			t.Errorf("diagnosis %d: %+v; want code 0, kind %s", id, r, kind)
		}
	}
	if l := replies[1].Locks; len(l) != 1 || l[0].ID != "other" || l[0].Hostname != "elsewhere" {
		t.Errorf("diagnosis of the locked stack names %+v; want the lock file other.json of someone@elsewhere", l)
	}
	if r := replies[5]; r.Code == 0 || r.Kind != protocol.KindBadRequest || !strings.Contains(r.Stderr, "a/b/c/d") {
		t.Errorf("diagnosis of a bad stack name: %+v; want a bad request naming it", r)
	}

}
