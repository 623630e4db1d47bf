package watcher

import "syscall"

// freeBytes is the room on the file system holding dir that an unprivileged writer may use
// (statfs: available blocks times block size); false when it cannot be read.
func freeBytes(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * st.Bsize, true
}
