package stack

import (
	"math"
	"time"

	"github.com/prometheus/procfs"
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
