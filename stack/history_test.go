package stack

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// fileBackend is a file:// backend in a new directory, as a stateBackend: keys lists the
// objects (the file driver's .attrs sidecars are their metadata, not objects); every file,
// sidecars included, is under dir.
func fileBackend(t *testing.T) (stateBackend, string) {
	t.Helper()
	dir := t.TempDir()
	return stateBackend{
		url: "file://" + dir,
		keys: func(t *testing.T, prefix string) []string {
			var out []string
			for _, f := range filesUnder(t, dir) {
				if k := filepath.ToSlash(f); strings.HasPrefix(k, prefix) && !strings.HasSuffix(k, ".attrs") {
					out = append(out, k)
				}
			}
			return out
		},
		read: func(t *testing.T, key string) []byte {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(key)))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}, dir
}

// filesUnder lists every file below dir, relative to it, sorted.
func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
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

// greetingOf reads the "greeting" output out of a stored checkpoint.
var greetingOf = regexp.MustCompile(`"greeting":\s*"([^"]*)"`)

// TestHistoryBounded: on every path an up can take (no engine host, as with --engine-host none:
// ups are CLI runs and the pinned CLI's request processes prune; the engine host) and on the file
// and PostgreSQL backends, 30 updates of one stack leave its state, the state's .json.bak and the
// history of the KeepHistory newest updates, by update order even when the files' modification
// times say otherwise, and no checkpoint backups; destroying the stack leaves nothing of it.
func TestHistoryBounded(t *testing.T) {
	const keep, ups = 10, 30
	file := func(t *testing.T) (stateBackend, string) { return fileBackend(t) }
	postgres := func(t *testing.T) (stateBackend, string) { return postgresBackend(t), "" }
	tests := map[string]struct {
		backend func(t *testing.T) (stateBackend, string) // and the file backend's directory
		host    bool
	}{
		"file, no engine host":     {backend: file},
		"file, engine host":        {backend: file, host: true},
		"postgres, no engine host": {backend: postgres},
		"postgres, engine host":    {backend: postgres, host: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			b, dir := tc.backend(t)
			m := backendManager(t, b)
			m.cfg.KeepHistory = keep
			if tc.host {
				attachHost(t, m)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			stack, _ := m.StackName("ns", "history")
			// Every object the backend keeps of the stack: its state and .json.bak, history,
			// backups, locks.
			objects := func() []string {
				return slices.DeleteFunc(b.keys(t, ".pulumi/"), func(k string) bool { return !strings.Contains(k, "/"+stack) })
			}
			for i := range ups {
				if i == ups-3 && dir != "" {
					// The history so far gets modification times in the future, the oldest
					// update's the latest: a pruner that went by them would keep these and
					// delete the updates still to come.
					hist := filepath.Join(dir, ".pulumi", "history", "kindcustomhttp", stack)
					entries, err := os.ReadDir(hist)
					if err != nil || len(entries) == 0 {
						t.Fatalf("history of %s: %v, %d files", stack, err, len(entries))
					}
					for j, e := range entries { // sorted by name: by update time
						mtime := time.Now().Add(time.Duration(len(entries)-j) * time.Hour)
						if err := os.Chtimes(filepath.Join(hist, e.Name()), mtime, mtime); err != nil {
							t.Fatal(err)
						}
					}
				}
				if _, err := m.Up(ctx, stack, program(fmt.Sprint(i), 0), RunOptions{}); err != nil {
					t.Fatalf("up %d: %v", i+1, err)
				}
			}
			got := objects()
			t.Logf("after %d updates the backend holds %d objects of the stack", ups, len(got))
			if dir != "" {
				t.Logf("... in %d files (with the file driver's .attrs)", len(slices.DeleteFunc(filesUnder(t, dir), func(f string) bool { return !strings.Contains(f, stack) })))
			}
			var history, backups, states []string
			var greetings []int
			for _, k := range got {
				switch {
				case strings.HasPrefix(k, ".pulumi/history/"):
					history = append(history, k)
					if strings.HasSuffix(k, ".checkpoint.json") {
						g := greetingOf.FindSubmatch(b.read(t, k))
						if g == nil {
							t.Fatalf("checkpoint %s holds no greeting output", k)
						}
						n, _ := strconv.Atoi(string(g[1]))
						greetings = append(greetings, n)
					}
				case strings.HasPrefix(k, ".pulumi/backups/"):
					backups = append(backups, k)
				default:
					states = append(states, k)
				}
			}
			if want := []string{stacksPrefix + stack + ".json", stacksPrefix + stack + ".json.bak"}; !slices.Equal(states, want) {
				t.Errorf("state objects %v, want %v", states, want)
			}
			if len(backups) != 0 {
				t.Errorf("%d checkpoint backups kept, want none (the history holds the same checkpoints): %v", len(backups), backups)
			}
			if len(history) != 2*keep {
				t.Errorf("history holds %d files, want %d (the record and checkpoint of the %d newest updates)", len(history), 2*keep, keep)
			}
			slices.Sort(greetings)
			var want []int
			for i := ups - keep; i < ups; i++ {
				want = append(want, i)
			}
			if !slices.Equal(greetings, want) {
				t.Errorf("the history's checkpoints are of the updates with greetings %v, want the %d newest: %v", greetings, keep, want)
			}

			if _, err := m.Destroy(ctx, stack, RunOptions{}); err != nil {
				t.Fatalf("destroy: %v", err)
			}
			if left := objects(); len(left) != 0 {
				t.Errorf("after destroy the backend still holds %d objects of the stack: %v", len(left), left)
			}
			if dir != "" {
				left := slices.DeleteFunc(filesUnder(t, dir), func(f string) bool { return !strings.Contains(f, stack) })
				if len(left) != 0 {
					t.Errorf("after destroy the backend's directory still holds files of the stack: %v", left)
				}
			}
		})
	}
}

// TestPruneByCLIFails: without an engine host a failed prune never fails the up. A CLI that does
// not know the request command (one not built by this project; the wrapper answers every request
// as such a CLI does: an error, and no reply) is asked once (the new stack's creation) and never
// again; a failed prune (the command's reply says so) is tried again at the next one.
func TestPruneByCLIFails(t *testing.T) {
	tests := map[string]struct {
		only           string // the requests the wrapper fails: those whose JSON holds it ("": all)
		stdout, stderr string
		attempts       int
	}{
		"a CLI without the command": {stderr: `error: unknown command "operator-request" for "pulumi"`, attempts: 1},
		"the prune fails": {only: `"op":"prune"`, stdout: `{"code":1,"kind":"failed","pruneError":"prune the history of stack x: list: connection refused"}`,
			stderr: "error: prune the history of stack x: list: connection refused", attempts: 3},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "requests.log")
			wrapper := filepath.Join(dir, "cli", "bin", "pulumi")
			if err := os.MkdirAll(filepath.Dir(wrapper), 0o755); err != nil {
				t.Fatal(err)
			}
			script := fmt.Sprintf(`#!/bin/sh
for a; do
	if [ "$a" = operator-request ]; then
		req=$(cat)
		case "$req" in
		*'%s'*) echo request >> %q; echo %q; echo %q >&2; exit 1;;
		esac
		printf '%%s\n' "$req" | %q "$@"
		exit $?
	fi
done
exec %q "$@"
`, tc.only, log, tc.stdout, tc.stderr, testenv.PulumiCLI(t), testenv.PulumiCLI(t))
			if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			m, err := New(Config{Project: "kindcustomhttp", BackendURL: "file://" + filepath.Join(dir, "backend"), WorkRoot: filepath.Join(dir, "ws"),
				PulumiPath: wrapper, PulumiHome: DefaultPulumiHome(testenv.PulumiCLI(t)), ClusterName: "test", KeepHistory: 1,
				Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"}})
			if err != nil {
				t.Fatal(err)
			}
			stack, _ := m.StackName("ns", "prune")
			for i := range 3 {
				if _, err := m.Up(context.Background(), stack, program(fmt.Sprint(i), 0), RunOptions{}); err != nil {
					t.Fatalf("up %d: %v", i+1, err)
				}
			}
			b, _ := os.ReadFile(log)
			if got := strings.Count(string(b), "request\n"); got != tc.attempts {
				t.Errorf("the wrapper failed %d requests in 3 ups that each prune, want %d", got, tc.attempts)
			}
		})
	}
}
