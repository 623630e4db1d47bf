package stack

import (
	"regexp"
	"strconv"
	"time"
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
