package main

import (
	"slices"
	"strings"
	"testing"
)

// testdata/proc is a fake proc filesystem: the operator (100) with a pulumi CLI (101) running
// a provider plugin (102) and an exiting child without VmRSS (103); a cluster process (200)
// whose command name holds ") "; the machine's stat, loadavg, meminfo, cpuinfo and kernel
// release. testdata/proc-broken has a process stat and a cpu line that do not parse.

func testHost(t *testing.T, dir string) host {
	t.Helper()
	h, err := newHost(dir)
	if err != nil {
		t.Fatalf("newHost(%s): %v", dir, err)
	}
	return h
}

func TestHostCPU(t *testing.T) {
	h := testHost(t, "testdata/proc")
	tests := map[string]struct {
		pid  int
		want procCPU
	}{
		"utime+stime and cutime+cstime, in seconds": {pid: 100, want: procCPU{self: 3, children: 12}},
		"a command name with parentheses":           {pid: 200, want: procCPU{self: 100}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := h.cpu(tc.pid)
			if err != nil || got != tc.want {
				t.Errorf("cpu(%d) = %+v, %v; want %+v", tc.pid, got, err, tc.want)
			}
		})
	}
}

func TestHostCPUErrors(t *testing.T) {
	tests := map[string]struct {
		dir string
		pid int
	}{
		"process gone":        {dir: "testdata/proc", pid: 999},
		"stat does not parse": {dir: "testdata/proc-broken", pid: 100},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := testHost(t, tc.dir).cpu(tc.pid); err == nil || !strings.Contains(err.Error(), "read CPU time of process") {
				t.Errorf("cpu(%d) error = %v, want read CPU time of process", tc.pid, err)
			}
		})
	}
}

func TestNewHostMissing(t *testing.T) {
	if _, err := newHost("testdata/no-such-proc"); err == nil || !strings.Contains(err.Error(), "open proc filesystem") {
		t.Errorf("newHost of a missing directory: error %v, want open proc filesystem", err)
	}
}

func TestHostRSS(t *testing.T) {
	h := testHost(t, "testdata/proc")
	tests := map[string]struct {
		pid  int
		want int64
	}{
		"VmRSS in bytes":   {pid: 101, want: 102400 * 1024},
		"no VmRSS line":    {pid: 103, want: 0},
		"process gone":     {pid: 999, want: 0},
		"operator process": {pid: 100, want: 20480 * 1024},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := h.rss(tc.pid); got != tc.want {
				t.Errorf("rss(%d) = %d, want %d", tc.pid, got, tc.want)
			}
		})
	}
}

func TestHostTree(t *testing.T) {
	h := testHost(t, "testdata/proc")
	got := h.tree(100)
	if len(got) == 0 || got[0] != 100 {
		t.Fatalf("tree(100) = %v, want 100 first", got)
	}
	slices.Sort(got)
	if want := []int{100, 101, 102, 103}; !slices.Equal(got, want) {
		t.Errorf("tree(100) = %v, want %v (not 200, a child of 1)", got, want)
	}
	if got := h.tree(102); !slices.Equal(got, []int{102}) {
		t.Errorf("tree(102) = %v, want [102]", got)
	}
	if got := h.tree(999); !slices.Equal(got, []int{999}) {
		t.Errorf("tree(999) of a gone process = %v, want [999]", got)
	}
}

func TestHostMachineFigures(t *testing.T) {
	h := testHost(t, "testdata/proc")
	// user + nice + system + irq + softirq + steal of the cpu line, in ticks of 10 ms.
	if got, want := h.busy(), (1000.0+20+300+10+30+5)/100; got != want {
		t.Errorf("busy() = %v, want %v", got, want)
	}
	l := h.load("start")
	if l.Phase != "start" || l.Load1 != 0.52 || l.Load5 != 0.61 || l.Load15 != 0.70 || l.At.IsZero() {
		t.Errorf("load() = %+v, want start, 0.52 0.61 0.70, a time", l)
	}
	m := h.machine()
	if m.MemTotalMiB != 8192 || m.CPUModel != "Intel(R) Xeon(R) CPU @ 2.20GHz" || m.Kernel != "6.1.0-18-amd64" || m.CPUs < 1 {
		t.Errorf("machine() = %+v, want 8192 MiB, the Xeon, kernel 6.1.0-18-amd64", m)
	}
}

func TestHostUnreadable(t *testing.T) {
	h := testHost(t, "testdata/proc-broken")
	if got := h.busy(); got != 0 {
		t.Errorf("busy() of an unparsable /proc/stat = %v, want 0", got)
	}
	if l := h.load("x"); l.Load1 != 0 || l.Load5 != 0 || l.Load15 != 0 || l.Phase != "x" {
		t.Errorf("load() without loadavg = %+v, want zeros", l)
	}
	if m := h.machine(); m.MemTotalMiB != 0 || m.CPUModel != "" || m.Kernel != "" {
		t.Errorf("machine() without meminfo, cpuinfo, osrelease = %+v, want them empty", m)
	}
}

func TestPidFilesCPU(t *testing.T) {
	h := testHost(t, "testdata/proc")
	// etcd.pid (100, 3 s) + kube-apiserver.pid (200, 100 s); kwok.pid names a gone process,
	// kube-scheduler.pid no pid, notes.txt is no pid file.
	if got := h.pidFilesCPU("testdata/cluster-pids"); got != 103 {
		t.Errorf("pidFilesCPU = %v, want 103", got)
	}
	if got := h.pidFilesCPU("testdata/no-such-dir"); got != 0 {
		t.Errorf("pidFilesCPU of a missing directory = %v, want 0", got)
	}
}

func TestSampler(t *testing.T) {
	s := startSampler(testHost(t, "testdata/proc"), 100)
	peakTree, peakSelf, meanSelf, procs := s.stop()
	if want := int64(20480+102400+51200) * 1024; peakTree != want {
		t.Errorf("peak tree RSS = %d, want %d", peakTree, want)
	}
	if peakSelf != 20480*1024 || meanSelf != 20480*1024 || procs != 4 {
		t.Errorf("sampler = self peak %d, mean %d, %d processes; want %d, %d, 4", peakSelf, meanSelf, procs, 20480*1024, 20480*1024)
	}
	if a, b, c, d := s.stop(); a != peakTree || b != peakSelf || c != meanSelf || d != procs {
		t.Errorf("a second stop = %d %d %d %d, want the same figures", a, b, c, d)
	}
}
