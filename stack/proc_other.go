//go:build !linux

package stack

import "time"

// processStart is not known off Linux: OwnerGone then judges by the process id alone.
func processStart(int) (time.Time, bool) { return time.Time{}, false }

// descendants is not known off Linux.
func descendants(int) []int { return nil }

// awaitExit returns at once off Linux: the caller's Wait waits.
func awaitExit(int) {}

// killSession kills nothing off Linux, where a pulumi process gets no session of its own.
func killSession(int) int { return 0 }
