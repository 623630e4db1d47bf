package commands

import "syscall"

// volumeUsage is the size and the used bytes of the file system holding dir (statfs: blocks
// times block size, used counting the blocks reserved for root); false when it cannot be read.
func volumeUsage(dir string) (size, used uint64, ok bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	bs := uint64(st.Bsize)
	return st.Blocks * bs, (st.Blocks - st.Bfree) * bs, true
}
