package volume

import "syscall"

// Of is the Usage of the file system holding dir; false when it cannot be read (dir missing,
// or not readable).
func Of(dir string) (Usage, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return Usage{}, false
	}
	bs := uint64(st.Bsize)
	return Usage{Size: st.Blocks * bs, Used: (st.Blocks - st.Bfree) * bs, Available: st.Bavail * bs}, true
}
