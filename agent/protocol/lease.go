package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// The lease a leader-elected operator hands down to every pulumi process it starts (the engine
// host and each CLI run, both this repository's agent/cmd/pulumi binary). The operator may write
// state only while it holds the leader election Lease, and it fences itself (cancels, then kills)
// by a deadline it computes from its last successful renewal (docs/design/fencing.md). A child
// process goes on running when the operator cannot act, though: the operator paused (SIGSTOP, a
// long GC or page-in stall) while its children run. So each child gets the same deadline and
// enforces it itself: the operator writes every new deadline into a pipe the child inherits, and
// a child still running at its last deadline kills itself and what it started (WatchLease).
//
// The wire format on the pipe: a sequence of 8-byte big-endian int64 values, each a deadline on
// the machine's monotonic clock (CLOCK_MONOTONIC, nanoseconds; MonotonicNow), each replacing the
// one before. A value of 0 (or any past value) revokes the lease at once. The clock is shared by
// every process of one machine (and container: time namespaces are not used), does not jump when
// the wall clock is set, and is not the clock of another machine: a deadline never leaves the
// machine it was computed on.

// LeaseFDEnv names the environment variable holding the number of the file descriptor from which
// a pulumi process started by a leader-elected operator reads its lease deadlines. Unset: the
// process has no lease (a laptop's command, an operator without leader election).
const LeaseFDEnv = "PULUMI_OPERATOR_LEASE_FD"

// HolderFDEnv names the environment variable holding the file descriptor of the holder record a
// pulumi process started by the operator holds a flock(2) on for as long as it lives (the
// operator's proof that the process has ended: package stack, holder.go). The process keeps it
// from the processes it starts (KeepHolderRecord), so that the flock ends with it.
const HolderFDEnv = "PULUMI_OPERATOR_HOLDER_FD"

// KeepHolderRecord marks the holder record named by HolderFDEnv in getenv, if any, close-on-exec:
// the provider plugins this process starts must not hold its flock after it has ended.
func KeepHolderRecord(getenv func(string) string) {
	if fd, err := strconv.Atoi(getenv(HolderFDEnv)); err == nil && fd >= 3 {
		closeOnExec(fd)
	}
}

// ErrLeaseExpired is the error of an operation refused because this process's lease deadline
// has passed: the operator that started it may no longer be the leader, and another replica may
// write the stack.
var ErrLeaseExpired = errors.New("the operator's leader election lease has expired: no state may be written")

// EncodeDeadline is the 8-byte wire form of deadline d (CLOCK_MONOTONIC nanoseconds).
func EncodeDeadline(d int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(d))
	return b
}

// leaseDeadline is this process's lease deadline (CLOCK_MONOTONIC ns); math.MaxInt64 while the
// process has no lease (WatchLease not called, or LeaseFDEnv unset).
var leaseDeadline atomic.Int64

func init() { leaseDeadline.Store(math.MaxInt64) }

// LeaseValid reports nil while this process may write state: it has no lease, or its lease
// deadline has not passed; ErrLeaseExpired (wrapped, with how long ago) once it has.
func LeaseValid() error {
	d := leaseDeadline.Load()
	if d == math.MaxInt64 {
		return nil
	}
	if now := MonotonicNow(); now >= d {
		return fmt.Errorf("%w (%s ago)", ErrLeaseExpired, time.Duration(now-d).Round(time.Millisecond))
	}
	return nil
}

// WatchLease enforces the lease named by LeaseFDEnv in environ-style lookup getenv, if any: it
// reads the first deadline before it returns (the operator writes it before the process
// starts), then follows later ones in the background, and calls expire (which must end the
// process and what it started) as soon as the newest deadline passes. It returns whether a lease
// is enforced. Errors: LeaseFDEnv set but not a readable descriptor, or no first deadline in it;
// the caller must then not write state (the operator meant this process to hold a lease).
func WatchLease(getenv func(string) string, expire func()) (bool, error) {
	v := getenv(LeaseFDEnv)
	if v == "" {
		return false, nil
	}
	if !LeaseSupported {
		return false, fmt.Errorf("%s is set, but this platform has no shared monotonic clock to enforce a lease", LeaseFDEnv)
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return false, fmt.Errorf("%s=%q: want a file descriptor number of at least 3", LeaseFDEnv, v)
	}
	r := os.NewFile(uintptr(fd), "lease")
	if r == nil {
		return false, fmt.Errorf("%s=%d: not an open file descriptor", LeaseFDEnv, fd)
	}
	closeOnExec(fd) // provider plugins must not keep the pipe, or read it
	d, err := readDeadline(r)
	if err != nil {
		return false, fmt.Errorf("read the first lease deadline from %s=%d: %w", LeaseFDEnv, fd, err)
	}
	leaseDeadline.Store(d)
	updates := make(chan int64, 1)
	go func() {
		defer close(updates)
		for {
			d, err := readDeadline(r)
			if err != nil {
				return // the operator closed the pipe: the last deadline stands
			}
			select {
			case <-updates: // replace a deadline not yet taken
			default:
			}
			updates <- d
		}
	}()
	go enforce(updates, expire)
	return true, nil
}

// enforce calls expire once the newest deadline (leaseDeadline, then each value of updates)
// has passed.
func enforce(updates <-chan int64, expire func()) {
	for {
		wait := time.Duration(leaseDeadline.Load() - MonotonicNow())
		if wait <= 0 {
			expire()
			return
		}
		timer := time.NewTimer(wait)
		select {
		case d, ok := <-updates:
			timer.Stop()
			if !ok {
				updates = nil // no more updates: wait out the last deadline
				continue
			}
			leaseDeadline.Store(d)
		case <-timer.C:
			// Loop: the deadline is read again, so an update stored meanwhile counts.
		}
	}
}

// readDeadline reads one deadline from r.
func readDeadline(r io.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.BigEndian.Uint64(b[:])), nil
}
