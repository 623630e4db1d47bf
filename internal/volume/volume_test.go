package volume

import (
	"os"
	"path/filepath"
	"testing"
)

// The file system of a temporary directory has a size, some of it used and some available
// (no more than what is not used); a missing directory is false, not a zero Usage taken as
// real.
func TestOf(t *testing.T) {
	u, ok := Of(t.TempDir())
	if !ok {
		t.Fatal("Of(a temporary directory) = false")
	}
	if u.Size == 0 || u.Used > u.Size || u.Available > u.Size-u.Used {
		t.Errorf("Of = %+v: want a size, used no more than it, and available no more than the rest", u)
	}
	if _, err := os.Stat("/proc/self"); err == nil { // Linux: the call exists
		if _, ok := Of(filepath.Join(t.TempDir(), "missing")); ok {
			t.Error("Of(a missing directory) = true")
		}
	}
}
