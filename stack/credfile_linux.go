package stack

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// memoryFile returns a file that lives in memory only (memfd_create(2): no file system, never
// on disk), readable by this user's processes at path /proc/<this pid>/fd/<fd> for as long as
// this process keeps f open, holding content with mode 0600 (libpq and lib/pq ignore a password
// file that group or others may read). Errors: the system calls'.
func memoryFile(name string, content []byte) (f *os.File, path string, err error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, "", fmt.Errorf("memfd_create: %w", err)
	}
	f = os.NewFile(uintptr(fd), name)
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("chmod memory file: %w", err)
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("write memory file: %w", err)
	}
	return f, fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd), nil
}
