// Package volume reads how full a file system is (statfs), for the state volume's gauges and
// the watcher's room check. One place for the system call, which exists on Linux only.
package volume

// Usage is a file system's size and use, in bytes (statfs: blocks times the block size).
type Usage struct {
	// Size is the file system's size.
	Size uint64
	// Used counts the blocks in use, including those reserved for root.
	Used uint64
	// Available is the room an unprivileged writer may still use (the blocks free to it).
	Available uint64
}
