package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// endLease ends this process when its lease has expired (protocol.WatchLease): every process below
// it (the provider plugins, which pulumi starts in process groups of their own, and what they
// started) with SIGKILL, found through /proc's parent links while this process still holds them,
// then this process itself. Nothing of it writes state afterwards.
func endLease() {
	fmt.Fprintln(os.Stderr, "error: the operator's leader election lease expired: ending this process and the plugins it started, so that nothing writes the stack's state")
	for _, pid := range descendants(os.Getpid()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // SIGKILL cannot be caught: the process ends here
}

// descendants lists the processes below pid, from each process's parent in /proc/<pid>/stat.
func descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) < 2 {
			continue
		}
		child, err1 := strconv.Atoi(strings.Fields(s)[0])
		parent, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil {
			children[parent] = append(children[parent], child)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}
