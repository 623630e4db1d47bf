package stack

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// A lock a DIY backend holds on a stack names only the host, the process id and the wall-clock
// time of its taker (pkg/v3 backend/diy lockContent). None of them proves that the taker is gone:
// a host name is shared by every container of a host-network pod and by pods of one name in two
// clusters, a process id means nothing outside its PID namespace and is reused inside it. So the
// operator records, for every pulumi process it starts, a holder record: a file in
// <WorkRoot>/.holders that the process holds a flock(2) on for as long as it lives (it inherits
// the locked open file; the operator closes its own copy once the process has started). The
// kernel releases that flock when the last descriptor closes, that is when the process (in any
// PID namespace, before or after a container restart) has ended. A lock is "ours and dead" only
// when a holder record of this host matches it and its flock can be taken: proof, not inference.
//
// A record matches a lock of this host name when it has the lock's pid, it was written before the
// lock was taken (its process started first), its process had not ended before the lock was
// taken (an end is recorded when the operator reaps a process that failed), and, for a CLI run,
// it ran on the lock's stack. What is left unproven: a process of another PID namespace with
// this host name and the same pid taking a lock of the same stack while the recorded process ran;
// docs/design/fencing.md ("Which locks are removed") argues why that cannot be one of ours.

// holderDirName is the holder records' directory under the workspace root.
const holderDirName = ".holders"

// holderRecordAge is how long the record of an ended process is kept when nothing removed it: a
// lock it left is judged by it until then, and waited out (reported) after.
const holderRecordAge = 7 * 24 * time.Hour

// holderRecord is the content of a holder record.
type holderRecord struct {
	// Pid is the process's id in the operator's PID namespace; Host the host name it ran on.
	Pid  int    `json:"pid"`
	Host string `json:"host"`
	// Started is when the operator started it; Ended, when set, when the operator saw it end.
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	// Stack is the stack a CLI run worked on ("" for the engine host, which works on any).
	Stack string `json:"stack,omitempty"`
}

// holders makes and reads the holder records of one workspace root.
type holders struct {
	dir  string
	host string
}

// newHolders returns the holder records under workRoot, and removes those of processes that
// ended more than holderRecordAge ago. A host name that cannot be read leaves no record made
// (and no lock judged ours): host is then "".
func newHolders(workRoot string) *holders {
	host, _ := os.Hostname()
	h := &holders{dir: filepath.Join(workRoot, holderDirName), host: host}
	h.expire()
	return h
}

// pending is a holder record being made for a process about to start.
type pending struct {
	f    *os.File
	path string
	rec  holderRecord
}

// prepare makes the holder record of cmd (not yet started; stack is its stack, "" for an engine
// host): a new file, flocked, given to the process as one more of its ExtraFiles, named to it by
// protocol.HolderFDEnv. Errors: the record could not be made (the process must not start without one,
// or its locks could never be judged).
func (h *holders) prepare(cmd *exec.Cmd, stack string) (*pending, error) {
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create holder record directory: %w", err)
	}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	path := filepath.Join(h.dir, hex.EncodeToString(nonce[:])+".json")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create holder record: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("lock holder record %s: %w", path, err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, protocol.HolderFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	return &pending{f: f, path: path, rec: holderRecord{Host: h.host, Stack: stack}}, nil
}

// started writes the record of the process pid and closes the operator's copy of the file: the
// flock is the process's alone from now on. With pid 0 (the start failed) the record goes.
func (p *pending) started(pid int) {
	if p == nil {
		return
	}
	defer p.f.Close()
	if pid == 0 {
		os.Remove(p.path)
		return
	}
	p.rec.Pid, p.rec.Started = pid, time.Now()
	b, _ := json.Marshal(p.rec)
	if _, err := p.f.WriteAt(b, 0); err != nil {
		slog.Warn("could not write a pulumi process's holder record: a lock it leaves will be waited out", "path", p.path, "err", err)
	}
}

// exited records that the process ended: its record goes when it exited 0 (it released its
// locks), else it is kept with its end time, to judge the locks it may have left.
func (p *pending) exited(ok bool) {
	if p == nil {
		return
	}
	if ok {
		os.Remove(p.path)
		return
	}
	now := time.Now()
	p.rec.Ended = &now
	b, _ := json.Marshal(p.rec)
	_ = os.WriteFile(p.path, b, 0o600)
}

// judge says whether the lock l (of stack) was taken by a pulumi process of this operator's that
// has ended, proven by its holder record (see above): why is then the reason for people; alive
// reports a matching process that still runs (the lock is live: wait for it).
func (h *holders) judge(l Lock, stack string) (gone bool, alive bool, why string) {
	if h.host == "" || l.Host != h.host || l.Pid <= 0 || l.Created.IsZero() {
		return false, false, ""
	}
	best, path := h.match(l, stack)
	if path == "" {
		return false, false, ""
	}
	f, err := os.Open(path)
	if err != nil {
		return false, false, "" // removed meanwhile: its process exited 0 and released its lock
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, true, ""
	}
	if err != nil {
		return false, false, ""
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true, false, fmt.Sprintf("the pulumi process that took it (pid %d, started %s by this operator) has ended: its holder record is no longer locked",
		best.Pid, best.Started.Format(time.RFC3339))
}

// match returns the holder record that matches l (of stack) and its path: of l's pid, started
// no later than l was taken (one second of slack for the two readings of the same clock), not
// ended before it, of l's stack when it names one; the latest started of those (a pid is reused
// inside a PID namespace).
func (h *holders) match(l Lock, stack string) (holderRecord, string) {
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		return holderRecord{}, ""
	}
	var best holderRecord
	var bestPath string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(h.dir, e.Name())
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var r holderRecord
		if json.Unmarshal(b, &r) != nil || r.Pid != l.Pid || r.Host != h.host {
			continue
		}
		switch {
		case r.Started.After(l.Created.Add(time.Second)):
			continue // started after the lock was taken: not its taker
		case r.Ended != nil && l.Created.After(r.Ended.Add(time.Second)):
			continue // ended before the lock was taken
		case r.Stack != "" && r.Stack != stack:
			continue
		}
		if bestPath == "" || r.Started.After(best.Started) {
			best, bestPath = r, path
		}
	}
	return best, bestPath
}

// expire removes the records of processes that ended more than holderRecordAge ago (their flock
// free, their start older than that).
func (h *holders) expire() {
	entries, err := os.ReadDir(h.dir)
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-holderRecordAge)
	for _, e := range entries {
		path := filepath.Join(h.dir, e.Name())
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(cutoff) {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.Remove(path)
		}
		f.Close()
	}
}

// stackArg is the value of the --stack argument among a CLI run's args ("" when none).
func stackArg(args []string) string {
	if i := slices.Index(args, "--stack"); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--stack="); ok {
			return v
		}
	}
	return ""
}
