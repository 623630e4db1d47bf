package httpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// maxPeerFileBytes caps what is read of the peer file; at ~20 bytes a line 1 MiB is tens of
// thousands of peers, far beyond any sensible file. A larger file is reported as unreadable.
const maxPeerFileBytes = 1 << 20

// maxLoggedLineErrors is how many invalid lines are logged, one record each, per change of the
// file; the rest are counted in one record. A file may hold tens of thousands of lines past
// maxPeers, and a record each would flood the log at every change.
const maxLoggedLineErrors = 32

// errPeerFileTooLarge is returned by readPeerFile for a file over maxPeerFileBytes.
var errPeerFileTooLarge = fmt.Errorf("peer file larger than %d bytes", maxPeerFileBytes)

// peerFile is what the loop last saw of the peer file. Only the loop goroutine touches it.
type peerFile struct {
	loaded  bool   // content holds the file's bytes as last read successfully
	content []byte // raw bytes, compared to notice changes
	missing bool   // the file did not exist at the last check ("peer file missing" logged)
	readErr string // the last read error other than not-exist, logged once per distinct error
	peers   []Peer // valid peers of content; nil while missing
}

// peerLoop owns the peer file and the ping rounds until ctx ends.
//
// Changes are noticed by reading the file every WatchInterval and comparing its bytes, not
// with fsnotify (present in the module graph only indirectly). Kubernetes updates a ConfigMap
// volume by writing a new timestamped directory and swapping the "..data" symlink, so the file
// path never sees a write of its own: an inotify watch would have to follow the symlink chain
// in the parent directory and re-arm after each swap. Reading a file of a few hundred bytes
// once a second costs nothing, catches every kind of update (symlink swap, rename, in-place
// write, delete and re-create), and never spins: a missing file is just another state seen
// once per tick.
func (s *Server) peerLoop(ctx context.Context) {
	watch := time.NewTicker(s.opts.WatchInterval)
	defer watch.Stop()
	next := time.NewTimer(s.opts.Interval)
	defer next.Stop()

	s.checkPeerFile()
	s.ready.Store(true)
	s.pingRound(ctx, s.file.peers)
	next.Reset(s.opts.Interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-watch.C:
			if !s.checkPeerFile() {
				continue
			}
		case <-next.C:
		}
		s.pingRound(ctx, s.file.peers)
		// The next regular round is one interval after this one, whatever triggered it, so a
		// file change does not bring a second round right behind it.
		next.Reset(s.opts.Interval)
	}
}

// checkPeerFile reads the peer file and reports whether the peers to ping changed and a round
// should run now. Each state is logged once when it is entered: the file missing, a read error,
// and for new content the invalid lines (the first maxLoggedLineErrors) and a summary.
// Unchanged content logs nothing.
func (s *Server) checkPeerFile() (changed bool) {
	s.fileChecks.Add(1)
	path := s.opts.ConfigPath
	data, err := readPeerFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if s.file.missing {
			return false
		}
		s.log.Warn("peer file missing", "path", path)
		old := s.file.peers
		s.file = peerFile{missing: true}
		s.setPeers(old, nil, 0)
		return false
	case err != nil:
		// Keep pinging the peers last read: a transient error (permissions during an update)
		// should not silence the server.
		s.file.missing = false
		if s.file.readErr != err.Error() {
			s.file.readErr = err.Error()
			s.log.Error("read peer file failed", "path", path, "error", err)
		}
		return false
	}
	s.file.missing, s.file.readErr = false, ""
	if s.file.loaded && bytes.Equal(data, s.file.content) {
		return false
	}
	peers, bad := ParsePeers(data)
	for _, e := range bad[:min(len(bad), maxLoggedLineErrors)] {
		s.log.Warn("invalid peer line", "path", path, "line", e.Line, "text", e.Text, "reason", e.Reason)
	}
	if len(bad) > maxLoggedLineErrors {
		s.log.Warn("more invalid peer lines not logged", "path", path, "count", len(bad)-maxLoggedLineErrors,
			"from_line", bad[maxLoggedLineErrors].Line)
	}
	s.log.Info("peer file loaded", "path", path, "peers", len(peers), "invalid_lines", len(bad))
	old := s.file.peers
	s.file = peerFile{loaded: true, content: data, peers: peers}
	s.setPeers(old, peers, len(bad))
	return true
}

// setPeers brings the metrics and the kept results in line with a new peer list.
func (s *Server) setPeers(old, cur []Peer, invalid int) {
	s.metrics.setPeers(old, cur, invalid)
	keep := make(map[Peer]bool, len(cur))
	for _, p := range cur {
		keep[p] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for p := range s.results {
		if !keep[p] {
			delete(s.results, p)
		}
	}
}

// readPeerFile returns the file's bytes; its errors wrap fs.ErrNotExist when the file (or a
// symlink on its path) is missing, and errPeerFileTooLarge beyond maxPeerFileBytes.
func readPeerFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open peer file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPeerFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read peer file: %w", err)
	}
	if len(data) > maxPeerFileBytes {
		return nil, errPeerFileTooLarge
	}
	return data, nil
}
