package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// clockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat: 100 on every Linux
// this runs on (sysconf(_SC_CLK_TCK) would need cgo). procfs assumes the same in
// ProcStat.CPUTime and Stat; the children's times it leaves in ticks.
const clockTicks = 100

// host reads the figures of the machine and its processes from a proc filesystem through
// procfs: /proc for a run, a fake tree under testdata for the tests.
type host struct{ fs procfs.FS }

// newHost opens the proc filesystem mounted at mountPoint ("/proc"). Errors: it is not there.
func newHost(mountPoint string) (host, error) {
	fs, err := procfs.NewFS(mountPoint)
	if err != nil {
		return host{}, fmt.Errorf("open proc filesystem %s: %w", mountPoint, err)
	}
	return host{fs: fs}, nil
}

// procCPU is the CPU time of a process, in seconds (/proc/<pid>/stat): its own (utime+stime)
// and that of the children it has waited for (cutime+cstime).
type procCPU struct{ self, children float64 }

// cpu reads the CPU time of pid. Errors: the process is gone or its stat does not parse.
func (h host) cpu(pid int) (procCPU, error) {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return procCPU{}, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	st, err := p.Stat()
	if err != nil {
		return procCPU{}, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	return procCPU{self: st.CPUTime(), children: float64(st.CUTime+st.CSTime) / clockTicks}, nil
}

// treeCPU is the CPU time of pid and every live process below it (tree), each with the children
// it has waited for: the whole tree's CPU so far, also while a long-lived child (the engine
// host) has not exited and been waited for by pid. A process that exits meanwhile is left out.
func (h host) treeCPU(pid int) (float64, error) {
	var sum float64
	for i, p := range h.tree(pid) {
		c, err := h.cpu(p)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			continue
		}
		sum += c.self + c.children
	}
	return sum, nil
}

// rss is the resident set of pid in bytes (VmRSS of /proc/<pid>/status), 0 if it is gone.
func (h host) rss(pid int) int64 {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return 0
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0
	}
	return int64(st.VmRSS)
}

// tree lists pid and every process below it, pid first. procfs reads no
// /proc/<pid>/task/<tid>/children, so the tree comes from every process's parent (PPid of
// /proc/<n>/stat); a process that exits meanwhile is left out.
func (h host) tree(pid int) []int {
	children := map[int][]int{}
	if procs, err := h.fs.AllProcs(); err == nil {
		for _, p := range procs {
			if st, err := p.Stat(); err == nil {
				children[st.PPID] = append(children[st.PPID], p.PID)
			}
		}
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// busy is the CPU time, in seconds, all CPUs have spent on anything but idle and iowait since
// boot (the cpu line of /proc/stat; guest times are already in user and nice); 0 when it
// cannot be read.
func (h host) busy() float64 {
	st, err := h.fs.Stat()
	if err != nil {
		return 0
	}
	c := st.CPUTotal
	return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ + c.Steal
}

// load is /proc/loadavg at this moment, for phase; zeros when it cannot be read.
func (h host) load(phase string) LoadMark {
	m := LoadMark{Phase: phase, At: time.Now()}
	if l, err := h.fs.LoadAvg(); err == nil {
		m.Load1, m.Load5, m.Load15 = l.Load1, l.Load5, l.Load15
	}
	return m
}

// machine describes the machine: CPUs (of this process), memory (/proc/meminfo), CPU model
// (/proc/cpuinfo) and kernel release (/proc/sys/kernel/osrelease); what cannot be read stays
// empty.
func (h host) machine() Machine {
	m := Machine{CPUs: runtime.NumCPU()}
	if mi, err := h.fs.Meminfo(); err == nil && mi.MemTotal != nil {
		m.MemTotalMiB = int64(*mi.MemTotal) / 1024 // kB
	}
	if ci, err := h.fs.CPUInfo(); err == nil && len(ci) > 0 {
		m.CPUModel = ci[0].ModelName
	}
	if rel, err := h.fs.SysctlStrings("kernel.osrelease"); err == nil {
		m.Kernel = strings.Join(rel, " ")
	}
	return m
}

// pidFilesCPU is the CPU time, in seconds, of the processes whose pids are in the *.pid files
// of dir (a cluster's CLUSTER_DIR/pids); a file without a live process counts 0.
func (h host) pidFilesCPU(dir string) float64 {
	files, _ := filepath.Glob(filepath.Join(dir, "*.pid"))
	total := 0.0
	for _, f := range files {
		raw, _ := os.ReadFile(f)
		pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			continue
		}
		if c, err := h.cpu(pid); err == nil {
			total += c.self
		}
	}
	return total
}

// rusageCPU is the CPU time (user+system) of this process (RUSAGE_SELF) or of its waited-for
// children and their waited-for descendants (RUSAGE_CHILDREN).
func rusageCPU(who int) float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// sampler samples the resident memory of a process and its tree every 100 ms.
type sampler struct {
	mu                  sync.Mutex
	peakTree, peakSelf  int64
	lastSelf            int64
	peakProcs, samples  int
	sumSelf             float64
	stopOnce            sync.Once
	stopCh, stoppedChan chan struct{}
}

// startSampler starts sampling pid's tree (host.tree) and resident memory (host.rss).
func startSampler(h host, pid int) *sampler {
	s := &sampler{stopCh: make(chan struct{}), stoppedChan: make(chan struct{})}
	go func() {
		defer close(s.stoppedChan)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			pids := h.tree(pid)
			var tree int64
			for _, p := range pids {
				tree += h.rss(p)
			}
			self := h.rss(pid)
			s.mu.Lock()
			s.peakTree = max(s.peakTree, tree)
			s.peakSelf = max(s.peakSelf, self)
			s.peakProcs = max(s.peakProcs, len(pids))
			s.lastSelf = self
			s.sumSelf += float64(self)
			s.samples++
			s.mu.Unlock()
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// stop ends sampling and returns peak tree RSS, peak and mean RSS of the process itself
// (bytes), and the most processes seen at once in the tree.
func (s *sampler) stop() (peakTree, peakSelf, meanSelf int64, peakProcs int) {
	s.stopOnce.Do(func() { close(s.stopCh) })
	<-s.stoppedChan
	s.mu.Lock()
	defer s.mu.Unlock()
	mean := int64(0)
	if s.samples > 0 {
		mean = int64(s.sumSelf / float64(s.samples))
	}
	return s.peakTree, s.peakSelf, mean, s.peakProcs
}

// mib converts bytes to MiB.
func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }
