package httpserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// serveConfigKey answers GET /config/<key> with the content of the file <key> in the
// directory of Options.ConfigPath: the mounted ConfigMap's value for that key, as the pod sees
// it now (a ConfigMap change reaches it when the kubelet updates the volume). 404 when there
// is no such key; keys that are no ConfigMap key, and the volume's own "..data" entries, are
// refused the same way, and the file is opened within that directory (os.Root: the kubelet's
// symlinks into "..data" are followed, one that leads out of the directory is not), must be a
// regular file and at most maxConfigValue bytes, so nothing outside the ConfigMap's keys can
// be read.
func (s *Server) serveConfigKey(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if !configKey.MatchString(key) || key == "." || strings.HasPrefix(key, "..") {
		http.NotFound(w, r)
		return
	}
	b, err := readConfigKey(filepath.Dir(s.opts.ConfigPath), key)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("read config key", "key", key, "err", err)
		}
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(b)
}

// configKey is what a ConfigMap key may be (k8s.io/apimachinery validation.IsConfigMapKey:
// letters, digits, '-', '_' and '.'); the kubelet mounts each key as a file of that name.
var configKey = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// maxConfigValue is the largest file GET /config/<key> serves: a ConfigMap holds at most 1 MiB
// in all, so a larger file is no ConfigMap key.
const maxConfigValue = 1 << 20

// errNotConfigValue is a file that cannot be a ConfigMap key's: not a regular file, or larger
// than a ConfigMap.
var errNotConfigValue = errors.New("not a ConfigMap value")

// readConfigKey reads the file key of directory dir without leaving dir. Errors: fs.ErrNotExist
// (no such key, or no such directory), os.Root's for a path that escapes dir, errNotConfigValue.
func readConfigKey(dir, key string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(key)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > maxConfigValue {
		return nil, fmt.Errorf("%w: %s is %s, %d bytes", errNotConfigValue, key, st.Mode().Type(), st.Size())
	}
	return io.ReadAll(io.LimitReader(f, maxConfigValue))
}

// checkConfigPath refuses a peer file (Options.ConfigPath) inside refusedConfigRoots, named
// so or reached through symlinks, since its directory is what GET /config/<key> serves.
func checkConfigPath(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	paths := []string{abs}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		paths = append(paths, dir)
	}
	if file, err := filepath.EvalSymlinks(abs); err == nil {
		paths = append(paths, file)
	}
	for _, p := range paths {
		for _, root := range refusedConfigRoots {
			if p == root || strings.HasPrefix(p, root+"/") {
				return fmt.Errorf("config %s: a peer file under %s is refused: its directory is served as /config/<key>", path, root)
			}
		}
	}
	return nil
}

// refusedConfigRoots are the trees a peer file may not be in: the kernel's views of processes
// and devices. The server serves the peer file's directory (GET /config/<key>), and
// /proc/self/environ is the process's environment, a Secret's values among them.
var refusedConfigRoots = []string{"/proc", "/sys", "/dev"}
