//go:build !linux

package commands

// volumeUsage is not measured off Linux.
func volumeUsage(string) (size, used uint64, ok bool) { return 0, 0, false }
