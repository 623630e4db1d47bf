// Package fence is a leader-elected operator's permission to write state, on a deadline the
// operator computes itself from its own clock, so that losing the permission never waits on the
// API server (docs/design/fencing.md has the arithmetic and why each number is what it is).
//
// A leader may write while its last successful Lease renewal is fresh. Another replica may take
// the Lease LeaseDuration after it last saw a renewal, and it cannot see one before the renewal
// was sent, so the earliest takeover is (send time of the last successful renewal) +
// LeaseDuration. The leader therefore stops writing at that send time + RenewDeadline (Fence.Check
// fails: no status write, no new operation; operations are cancelled), and every pulumi process
// it started is gone by that + KillAfter (killed by the operator, and by the process itself
// through the lease deadline handed down to it: agent/protocol WatchLease). Validate checks that
// this leaves a margin before the earliest takeover.
//
// All times are on the machine's monotonic clock (protocol.MonotonicNow): the wall clock may be
// set, another machine's clock is never compared.
package fence

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// KillAfter is how long after the write deadline the pulumi processes of a fenced leader may run:
// the time its cancelled operations get to stop gracefully (write their checkpoint and release
// their lock, as a cancelled `pulumi up` does on SIGINT) before they are killed. It is also when a
// child process's own lease deadline falls.
const KillAfter = 2 * time.Second

// Margin is the least time Validate requires between the kill deadline and the earliest moment
// another replica may lead: room for the kill itself (signals, the kernel reaping a process group)
// and for the two machines' clocks running at slightly different rates over a lease.
const Margin = time.Second

// ErrFenced is the error of a write or a process start refused because the write permission has
// expired or was revoked: another replica may lead now.
var ErrFenced = errors.New("fenced: this replica may no longer be the leader")

// Validate checks leader election durations against the fence: RetryPeriod < RenewDeadline <
// LeaseDuration (client-go's own rule) and LeaseDuration - RenewDeadline >= KillAfter + Margin.
// Its error shows the arithmetic and names the flags to change.
func Validate(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	if retryPeriod <= 0 || retryPeriod >= renewDeadline || renewDeadline >= leaseDuration {
		return fmt.Errorf("leader election: want 0 < --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)",
			retryPeriod, renewDeadline, leaseDuration)
	}
	if gap, need := leaseDuration-renewDeadline, KillAfter+Margin; gap < need {
		return fmt.Errorf("leader election: --leader-election-lease-duration (%s) - --leader-election-renew-deadline (%s) = %s leaves no room to fence: "+
			"a leader that can no longer renew stops writing at its last renewal + %s and kills its pulumi processes %s later, and another replica may lead at its last renewal + %s; "+
			"the difference must be at least %s (kill time %s + margin %s): raise the lease duration to at least %s or lower the renew deadline to at most %s",
			leaseDuration, renewDeadline, gap, renewDeadline, KillAfter, leaseDuration, need, KillAfter, Margin, renewDeadline+need, leaseDuration-need)
	}
	return nil
}

// Fence is one leader's write permission. A nil *Fence is no fence at all (a single replica
// without leader election, a laptop's command): every check passes and processes get no lease.
// Its methods are safe for concurrent use.
type Fence struct {
	renewDeadline time.Duration
	now           func() int64 // protocol.MonotonicNow; tests replace it

	mu sync.Mutex
	// renewed is the send time of the last successful renewal (CLOCK_MONOTONIC ns); 0 before the
	// first.
	renewed int64
	revoked bool
	// pipes are the write ends of the lease pipes of running processes (Attach).
	pipes   map[*os.File]struct{}
	expired chan struct{} // closed once the write deadline passes or Revoke is called
	timer   *time.Timer
}

// New returns the fence of a leader whose Lease renew deadline is renewDeadline. It grants
// nothing until the first Renewed.
func New(renewDeadline time.Duration) *Fence {
	return &Fence{renewDeadline: renewDeadline, now: protocol.MonotonicNow, pipes: map[*os.File]struct{}{}, expired: make(chan struct{})}
}

// Now is the fence's clock (protocol.MonotonicNow): the time a renewal is sent, read before the
// request goes out.
func (f *Fence) Now() int64 { return f.now() }

// Renewed records a renewal (or the acquisition) of the Lease that succeeded and was sent at sent
// (Now, read before sending): writes are permitted until sent + renewDeadline, processes may run
// until that + KillAfter. Every running process gets the new deadline. It does nothing once the
// fence has expired or was revoked: a leader that stopped writing does not start again (it exits).
func (f *Fence) Renewed(sent int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.revoked || sent <= f.renewed {
		return
	}
	if f.renewed != 0 && f.now() >= f.renewed+int64(f.renewDeadline) {
		f.expireLocked() // the deadline passed before this late renewal: too late
		return
	}
	f.renewed = sent
	f.sendLocked(f.killDeadlineLocked())
	if f.timer != nil {
		f.timer.Stop()
	}
	f.timer = time.AfterFunc(time.Duration(f.renewed+int64(f.renewDeadline)-f.now()), f.checkExpiry)
}

// checkExpiry expires the fence when its write deadline has passed (the timer may race a renewal).
func (f *Fence) checkExpiry() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.revoked && f.now() >= f.renewed+int64(f.renewDeadline) {
		f.expireLocked()
	}
}

// pipeWriteWait bounds a write to a lease pipe: a process that does not read its pipe (stopped,
// or hung) must not hold up the renewal that writes to it; it keeps the deadline it last read and
// ends by it.
const pipeWriteWait = 50 * time.Millisecond

// sendLocked writes deadline d to every running process's lease pipe.
func (f *Fence) sendLocked(d int64) {
	b := protocol.EncodeDeadline(d)
	for p := range f.pipes {
		_ = p.SetWriteDeadline(time.Now().Add(pipeWriteWait))
		_, _ = p.Write(b) // a process that has gone is taken off by its exited
	}
}

// Revoke ends the permission at once and for good (the Lease is known to be lost, or the process
// stops leading): Check fails from now on, no process may start, and every running process ends
// within KillAfter (sooner when its deadline so far is sooner).
func (f *Fence) Revoke() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.expireLocked()
}

// expireLocked ends the permission. Running processes keep at most KillAfter from now: the time
// their cancelled operations get to stop gracefully, never past their deadline so far.
func (f *Fence) expireLocked() {
	if f.revoked {
		return
	}
	kill := f.now() + int64(KillAfter)
	if d := f.killDeadlineLocked(); d != 0 && d < kill {
		kill = d
	}
	f.revoked = true
	if f.timer != nil {
		f.timer.Stop()
	}
	f.sendLocked(kill)
	close(f.expired)
}

// Expired is closed once the write deadline has passed without a renewal, or Revoke was called.
// A nil fence never expires.
func (f *Fence) Expired() <-chan struct{} {
	if f == nil {
		return nil
	}
	return f.expired
}

// Check returns nil while this replica may write state: a nil fence, or one renewed less than
// the renew deadline ago. Otherwise ErrFenced, wrapped with why.
func (f *Fence) Check() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.revoked:
		return fmt.Errorf("%w: its write permission was revoked", ErrFenced)
	case f.renewed == 0:
		return fmt.Errorf("%w: it has not acquired the Lease", ErrFenced)
	}
	if late := f.now() - (f.renewed + int64(f.renewDeadline)); late >= 0 {
		return fmt.Errorf("%w: its last successful Lease renewal was sent %s ago, more than the renew deadline %s",
			ErrFenced, time.Duration(f.now()-f.renewed).Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}

// SinceRenewal is how long ago the last successful renewal was sent; math.MaxInt64 before the first.
func (f *Fence) SinceRenewal() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renewed == 0 {
		return math.MaxInt64
	}
	return time.Duration(f.now() - f.renewed)
}

// killDeadlineLocked is when processes must be gone: the write deadline + KillAfter; 0 once
// revoked or before the first renewal.
func (f *Fence) killDeadlineLocked() int64 {
	if f.revoked || f.renewed == 0 {
		return 0
	}
	return f.renewed + int64(f.renewDeadline+KillAfter)
}

// Attach prepares cmd, not yet started, to run under the fence: it refuses (ErrFenced) once
// the processes' deadline has passed, and gives the process a lease pipe (protocol.LeaseFDEnv,
// one more of cmd.ExtraFiles) holding the current deadline, through which it gets every later one
// (the process enforces it itself: protocol.WatchLease). Call started after cmd.Start (whether it
// succeeded or not) and exited once the process has exited. A nil fence changes nothing. Errors:
// ErrFenced, or the pipe could not be made.
func (f *Fence) Attach(cmd *exec.Cmd) (started, exited func(), err error) {
	if f == nil || !protocol.LeaseSupported {
		return func() {}, func() {}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.killDeadlineLocked()
	if d == 0 || f.now() >= d {
		return nil, nil, fmt.Errorf("%w: no pulumi process may start", ErrFenced)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, fmt.Errorf("create lease pipe: %w", err)
	}
	if _, err := w.Write(protocol.EncodeDeadline(d)); err != nil {
		r.Close()
		w.Close()
		return nil, nil, fmt.Errorf("write lease pipe: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(env, protocol.LeaseFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)))
	f.pipes[w] = struct{}{}
	started = func() { r.Close() }
	exited = func() {
		f.mu.Lock()
		delete(f.pipes, w)
		f.mu.Unlock()
		w.Close()
	}
	return started, exited, nil
}
