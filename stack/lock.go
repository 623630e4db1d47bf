package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrename"
)

// Lock is one lock on a stack as a DIY backend reports it: who took it, where and when.
type Lock struct {
	// User and Host name the process that took the lock; Pid is its process id on Host.
	User string
	Host string
	Pid  int
	// Created is when the lock was taken.
	Created time.Time
}

// OwnerGone reports whether l was taken by a process of this host that no longer runs: a
// pulumi CLI or engine host killed by SIGKILL (a crashed pod, kill -9, a fenced leader), or
// interrupted before it installed its own handler (the DIY backend locks the stack before the
// engine's cancellation scope exists: pkg/backend/diy Update, then apply). A process id that
// runs again, but in a process started after the lock was taken, is another process (pids are
// reused, and a restarted container counts them from 1 again), so that lock is gone too. Such a
// lock can be removed at once (CancelLock). A lock of another host is never gone by this rule:
// its process cannot be checked from here (the watcher's Lease rule covers the operator's own
// earlier pods).
func (l Lock) OwnerGone() bool {
	host, err := os.Hostname()
	if err != nil || l.Host != host {
		return false
	}
	if !processAlive(l.Pid) {
		return true
	}
	started, ok := processStart(l.Pid)
	// One second of slack: the lock's time and the start time come from two clocks' readings
	// (the start time is counted in clock ticks since boot).
	return ok && !l.Created.IsZero() && started.After(l.Created.Add(time.Second))
}

// processAlive reports whether pid runs on this host (signal 0 checks without signalling).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// lockLine matches the DIY backend's report of one lock (pkg/backend/diy/lock.go):
// "  <url>: created by <user>@<host> (pid <pid>) at <RFC 3339 time>".
var lockLine = regexp.MustCompile(`created by (\S*)@(\S+) \(pid (\d+)\) at (\S+)`)

// parseLocks reads every lock out of a CLI error message; an unparsable line is skipped.
func parseLocks(msg string) []Lock {
	var locks []Lock
	seen := map[string]bool{}
	for _, m := range lockLine.FindAllStringSubmatch(msg, -1) {
		if seen[m[0]] { // the CLI's message appears in both stdout and stderr
			continue
		}
		seen[m[0]] = true
		pid, err := strconv.Atoi(m[3])
		if err != nil {
			continue
		}
		t, err := time.Parse(time.RFC3339, m[4])
		if err != nil {
			continue
		}
		locks = append(locks, Lock{User: m[1], Host: m[2], Pid: pid, Created: t})
	}
	return locks
}

// lockFile is the JSON of one DIY backend lock file (pkg/backend/diy/lock.go lockContent).
type lockFile struct {
	Pid       int       `json:"pid"`
	Username  string    `json:"username"`
	Hostname  string    `json:"hostname"`
	Timestamp time.Time `json:"timestamp"`
}

// fileBackendLocks reads the locks a file:// backend holds on stack project/stackName, from
// the files <backend dir>/.pulumi/locks/<organization>/<project>/<stack>/<lock id>.json
// (pkg/backend/diy lock.go stackLockDir and lockPath; a DIY backend's organization is always
// "organization", matched by a wildcard all the same).
//
// held is true when at least one lock file exists; locks lists those that parse (a lock file
// that is being written may be empty, and still means the lock is taken). Any other backend
// (postgres://, s3://, Pulumi Cloud) has no lock files to read: held is false. An error means
// the lock directory could not be read, so whether a lock is held is unknown.
func fileBackendLocks(backendURL, project, stackName string) (held bool, locks []Lock, err error) {
	u, err := url.Parse(backendURL)
	if err != nil || u.Scheme != "file" {
		return false, nil, nil
	}
	orgs := filepath.Join(u.Path, ".pulumi", "locks")
	entries, err := os.ReadDir(orgs)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("read lock directory: %w", err)
	}
	for _, org := range entries {
		dir := filepath.Join(orgs, org.Name(), project, stackName)
		files, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, nil, fmt.Errorf("read lock directory: %w", err)
		}
		for _, f := range files {
			if f.IsDir() || filepath.Ext(f.Name()) != ".json" {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, f.Name()))
			if errors.Is(err, fs.ErrNotExist) { // released while this looked
				continue
			}
			held = true
			var c lockFile
			if err != nil || json.Unmarshal(b, &c) != nil {
				continue
			}
			locks = append(locks, Lock{User: c.Username, Host: c.Hostname, Pid: c.Pid, Created: c.Timestamp})
		}
	}
	return held, locks, nil
}

// CancelLock removes the stack's lock (`pulumi cancel`). Only call it for a lock whose owner
// is known to be gone: an update still running would go on without a lock, and two updates at
// once can corrupt the state.
//
// A lock can outlive its stack: a DIY backend's `stack init` and `stack rm` take the lock too
// (pkg/backend/diy CreateStack, RemoveStack), so a process killed inside either leaves the
// lock of a stack that does not exist, and `pulumi cancel` refuses a stack that does not
// exist. Then CancelLock makes the stack exist without taking its lock, by creating a
// throwaway stack and renaming it (renameStack locks only the old name), cancels, and
// removes the stack again.
//
// On a file:// backend CancelLock first repairs the stack's metadata sidecars (see
// repairSidecars): the process that left the lock may have died while writing one, and the
// CLI then cannot even select the stack ("failed to load checkpoint: EOF"). Each file it
// removes is logged as a warning with slog's default logger.
func (m *Manager) CancelLock(ctx context.Context, stackName string) error {
	removed, err := repairSidecars(m.cfg.BackendURL, m.cfg.Project, stackName)
	if err != nil {
		return fmt.Errorf("repair the metadata files of stack %s: %w", stackName, err)
	}
	for _, f := range removed {
		slog.Warn("removed a torn metadata file of the stack, left by a killed pulumi process", "stack", stackName, "file", f)
	}
	st, err := m.open(ctx, stackName, false)
	if err != nil && auto.IsSelectStack404Error(err) {
		return m.cancelLockOfMissingStack(ctx, stackName)
	}
	if err != nil {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	return nil
}

// cancelLockOfMissingStack is CancelLock for a stack that does not exist; see there.
func (m *Manager) cancelLockOfMissingStack(ctx context.Context, stackName string) error {
	tmpName := scratchName("lock-sweep-")
	defer func() { _ = os.RemoveAll(filepath.Join(m.cfg.WorkRoot, tmpName)) }()
	tmp, err := m.open(ctx, tmpName, true)
	if err != nil {
		return fmt.Errorf("create stack %s to take over the lock of missing stack %s: %w", tmpName, stackName, m.classifyStack(tmpName, err))
	}
	// auto's Rename reads the history of the old name after `stack rename` and so always
	// fails once the rename has worked: whether the stack now exists is the answer.
	_, renameErr := tmp.Rename(ctx, optrename.StackName(stackName))
	st, err := m.open(ctx, stackName, false)
	if err != nil {
		_ = tmp.Workspace().RemoveStack(context.WithoutCancel(ctx), tmpName)
		if renameErr != nil {
			err = renameErr
		}
		return fmt.Errorf("rename stack %s to missing stack %s: %w", tmpName, stackName, m.classifyStack(stackName, err))
	}
	if err := st.Cancel(ctx); err != nil {
		return fmt.Errorf("cancel lock of stack %s: %w", stackName, m.classifyStack(stackName, err))
	}
	if err := st.Workspace().RemoveStack(ctx, stackName); err != nil {
		return fmt.Errorf("remove stack %s after cancelling its lock: %w", stackName, m.classifyStack(stackName, err))
	}
	return m.forget(stackName)
}

// repairSidecars removes the torn metadata sidecars of stack project/stackName on a file://
// backend and returns their paths; any other backend has none (nil, nil).
//
// The file backend is gocloud's fileblob (gocloud.dev/blob/fileblob), which keeps each
// blob's metadata in "<file>.attrs" beside it. It writes the blob itself atomically (a
// temporary file renamed into place) but the sidecar in place: setAttrs truncates it, then
// encodes JSON into it. A pulumi process killed between the two (SIGKILL, a crashed pod; a
// kill inside `stack init`, for one) leaves an empty sidecar, and from then on every read of
// the blob fails with the JSON decoder's "EOF": `stack select` reports "failed to load
// checkpoint: EOF" although the checkpoint itself is whole.
//
// A sidecar is torn when it is not a JSON object. Removing one loses nothing the DIY
// backend uses: fileblob reads a missing sidecar as default metadata (getAttrs), and the
// checkpoint, lock, history and backup files themselves are never touched. The places
// looked at are the DIY backend's for one stack (pkg/backend/diy): stacks/<project>/<stack>.json*
// (with any organization directory in between), locks/<org>/<project>/<stack>/,
// history/<project>/<stack>/ and backups/<project>/<stack>/, all under <dir>/.pulumi.
//
// An error means a directory or sidecar could not be read or a torn one not removed; the
// paths removed until then are returned with it.
func repairSidecars(backendURL, project, stackName string) ([]string, error) {
	u, err := url.Parse(backendURL)
	if err != nil || u.Scheme != "file" {
		return nil, nil
	}
	root := filepath.Join(u.Path, ".pulumi")
	// Project and stack names hold no glob metacharacters (tokens.ValidateProjectName, Name).
	// "<stack>.json*" also matches the .bak and compressed variants, and the files of a
	// stack whose name starts with "<stack>.json"; a torn sidecar of that one is as safe to
	// remove.
	patterns := []string{
		filepath.Join(root, "stacks", project, stackName+".json*.attrs"),
		filepath.Join(root, "stacks", "*", project, stackName+".json*.attrs"),
		filepath.Join(root, "locks", "*", project, stackName, "*.attrs"),
		filepath.Join(root, "history", project, stackName, "*.attrs"),
		filepath.Join(root, "backups", project, stackName, "*.attrs"),
	}
	var removed []string
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil {
			return removed, err
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return removed, err
			}
			var obj map[string]any
			if json.Unmarshal(b, &obj) == nil && obj != nil {
				continue
			}
			if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return removed, err
			}
			removed = append(removed, f)
		}
	}
	return removed, nil
}
