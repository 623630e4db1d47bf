package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes on a new directory and returns it: a file system of a
// fixed size, as a PersistentVolumeClaim gives the operator's state, that a test can fill. It
// is unmounted when the test ends, after the cleanups registered later (processes writing to
// it) have run. It needs root (CAP_SYS_ADMIN): without, the test is skipped, loudly.
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "volume")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size))
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("SKIP: mounting a tmpfs of %d bytes as a volume to fill needs root (CAP_SYS_ADMIN), which this test process lacks: %v", size, err)
	}
	if err != nil {
		t.Fatalf("mount a tmpfs of %d bytes on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// FillTo writes a file "ballast" into dir until the file system holding it has at most free
// bytes left to an unprivileged writer (statfs), and returns the ballast's size.
func FillTo(t testing.TB, dir string, free int64) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	ballast := int64(st.Bavail)*st.Bsize - free
	f, err := os.Create(filepath.Join(dir, "ballast"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	for left := ballast; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			t.Fatalf("write the ballast: %v", err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return ballast
}
