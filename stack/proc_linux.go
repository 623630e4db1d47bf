package stack

import (
	"errors"
	"math"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// processStart is when process pid started (procfs: its stat's start time over the boot time);
// false when it cannot be read.
func processStart(pid int) (time.Time, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return time.Time{}, false
	}
	st, err := p.Stat()
	if err != nil {
		return time.Time{}, false
	}
	t, err := st.StartTime()
	if err != nil {
		return time.Time{}, false
	}
	sec, frac := math.Modf(t)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}

// descendants lists the processes below pid (children, their children, ...), from the parent
// of every process procfs lists; nil when /proc cannot be read.
func descendants(pid int) []int {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, p := range procs {
		if st, err := p.Stat(); err == nil {
			children[st.PPID] = append(children[st.PPID], p.PID)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// awaitExit blocks until process pid, a child of this process, has exited, without reaping it
// (waitid with WNOWAIT): until the caller's exec.Cmd.Wait reaps it, pid names that exited
// process and no other, and so does its session's id (killSession).
func awaitExit(pid int) {
	var info unix.Siginfo
	for errors.Is(unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil), unix.EINTR) {
	}
}

// killSessionWait bounds how long killSession waits for the processes it killed to be gone: a
// SIGKILLed process runs on (state R or D) while the kernel tears it down, which on a loaded
// machine takes more than a few looks at /proc.
const killSessionWait = 5 * time.Second

// killSession sends SIGKILL to every process of session sid (procfs: the session field of each
// stat) except process sid itself, the session's leader, and looks again every few milliseconds
// until a look finds none left that is not a zombie (or killSessionWait has passed), so that
// when it returns they have ended; it returns how many processes it signalled. A pulumi process
// runs as the leader of a session of its own (setProcAttr) and every process it starts stays in
// that session, also those that put themselves in process groups of their own (the provider
// plugins) and those whose parent has died: after the leader's exit, what the session still
// holds is what it left.
func killSession(sid int) int {
	killed := map[int]bool{}
	deadline := time.Now().Add(killSessionWait)
	for pass := 0; ; pass++ {
		if pass > 0 {
			if time.Now().After(deadline) {
				return len(killed)
			}
			time.Sleep(5 * time.Millisecond)
		}
		procs, err := procfs.AllProcs()
		if err != nil {
			return len(killed)
		}
		found := 0
		for _, p := range procs {
			st, err := p.Stat()
			if err != nil || st.Session != sid || p.PID == sid || st.State == "Z" {
				continue
			}
			if syscall.Kill(p.PID, syscall.SIGKILL) == nil {
				found++
				killed[p.PID] = true
			}
		}
		if found == 0 {
			return len(killed)
		}
	}
}
