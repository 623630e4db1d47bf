package protocol

import (
	"syscall"
	"unsafe"
)

// LeaseSupported: Linux has CLOCK_MONOTONIC, one clock for every process of the machine.
const LeaseSupported = true

// MonotonicNow is the machine's CLOCK_MONOTONIC in nanoseconds: the clock lease deadlines are
// on. Unlike time.Now's monotonic reading, which Go keeps private to the process, its value
// means the same in every process of the machine.
func MonotonicNow() int64 {
	var ts syscall.Timespec
	// clock_gettime(CLOCK_MONOTONIC, &ts); CLOCK_MONOTONIC is 1 on Linux. It cannot fail with a
	// valid clock and address.
	_, _, _ = syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

// closeOnExec keeps fd from the processes this one starts.
func closeOnExec(fd int) { syscall.CloseOnExec(fd) }
