//go:build !linux

package protocol

import "time"

// LeaseSupported: elsewhere no clock shared by processes is read here; a lease is refused
// (WatchLease) and the operator starts children without one.
const LeaseSupported = false

// processStart anchors MonotonicNow.
var processStart = time.Now()

// MonotonicNow is time since this process started: comparable within the process only, which is
// all a platform without leases needs.
func MonotonicNow() int64 { return int64(time.Since(processStart)) }

func closeOnExec(int) {}
