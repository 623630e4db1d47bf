package httpserver

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pongServer is a peer on 127.0.0.1 answering "pong from <name>".
func pongServer(t *testing.T, name string) Peer {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "pong from "+name)
	}))
	t.Cleanup(ts.Close)
	return peerOf(t, ts.Listener.Addr().String())
}

func succeeded(r Result) bool { return r.Err == nil }

// TestPeerFileChangeTriggersRound uses a one-hour interval, so the only way the new peer gets
// pinged within the test is the change of the file.
func TestPeerFileChangeTriggersRound(t *testing.T) {
	a, b := pongServer(t, "a"), pongServer(t, "b")
	s, rec := newServer(t, Options{Interval: time.Hour})
	writePeerFile(t, s.opts.ConfigPath, line(a))
	start(t, s, rec)
	waitResult(t, s, a, "first round pings a", succeeded)

	writePeerFile(t, s.opts.ConfigPath, line(b))
	r := waitResult(t, s, b, "the changed file's peer b pinged", succeeded)
	if r.Body != "pong from b" {
		t.Errorf("b answered %q, want \"pong from b\"", r.Body)
	}
	if got := s.Rounds(); got != 2 {
		t.Errorf("rounds = %d, want 2 (start, change)", got)
	}
	if _, ok := s.LastResults()[a]; ok {
		t.Error("a, removed from the file, still has a result")
	}
	page := scrape(t, s)
	if _, ok := metricValue(page, metricPings, map[string]string{"peer": a.String(), "result": resultSuccess}); ok {
		t.Error("a, removed from the file, still has a pings series")
	}
	if v, _ := metricValue(page, metricPeers, nil); v != 1 {
		t.Errorf("%s = %v, want 1", metricPeers, v)
	}
}

// TestPeerFileSymlinkSwap updates the file the way kubelet updates a ConfigMap volume: the
// file is a symlink through "..data", and "..data" is swapped to a new directory.
func TestPeerFileSymlinkSwap(t *testing.T) {
	a, b := pongServer(t, "a"), pongServer(t, "b")
	dir := t.TempDir()
	for name, p := range map[string]Peer{"v1": a, "v2": b} {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "hostports"), []byte(line(p)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink("v1", filepath.Join(dir, "..data")))
	must(os.Symlink("..data/hostports", filepath.Join(dir, "hostports")))

	s, rec := startServer(t, Options{ConfigPath: filepath.Join(dir, "hostports"), Interval: time.Hour})
	waitResult(t, s, a, "a pinged through the symlinks", succeeded)

	must(os.Symlink("v2", filepath.Join(dir, "..data_tmp")))
	must(os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
	waitResult(t, s, b, "b pinged after the swap", succeeded)
	if n := len(rec.find("peer file loaded")); n != 2 {
		t.Errorf("\"peer file loaded\" logged %d times, want 2", n)
	}
}

func TestMalformedPeerFile(t *testing.T) {
	good := pongServer(t, "good")
	content := "# peers\n" + line(good) + "no-comma\n\nhost,99999\n,80\n"
	s, rec := newServer(t, Options{Interval: 30 * time.Millisecond})
	writePeerFile(t, s.opts.ConfigPath, content)
	start(t, s, rec)

	waitResult(t, s, good, "the good line pinged", succeeded)
	waitFor(t, "3 rounds", func() bool { return s.Rounds() >= 3 })
	waitChecks(t, s, 5)

	want := map[string]string{"3": reasonNoComma, "5": reasonBadPort, "6": reasonEmptyHost}
	check := func(when string, wantInvalid, wantLoaded int) {
		t.Helper()
		bad := rec.find("invalid peer line")
		if len(bad) != wantInvalid {
			t.Errorf("%s: %d \"invalid peer line\" logs, want %d", when, len(bad), wantInvalid)
		}
		if n := len(rec.find("peer file loaded")); n != wantLoaded {
			t.Errorf("%s: %d \"peer file loaded\" logs, want %d", when, n, wantLoaded)
		}
	}
	check("after several rounds", 3, 1)
	for _, r := range rec.find("invalid peer line") {
		if reason, ok := want[r.attrs["line"]]; !ok || r.attrs["reason"] != reason || r.attrs["text"] == "" {
			t.Errorf("logged %v, want line/reason among %v with the text", r.attrs, want)
		}
	}
	if v, _ := metricValue(scrape(t, s), metricInvalid, nil); v != 3 {
		t.Errorf("%s = %v, want 3", metricInvalid, v)
	}

	// The same bytes written again (new inode, new mtime) are no change.
	writePeerFile(t, s.opts.ConfigPath, content)
	waitChecks(t, s, 10)
	check("after rewriting the same content", 3, 1)

	// New content is read, and its one bad line logged, once.
	writePeerFile(t, s.opts.ConfigPath, line(good)+"x,y\n")
	waitFor(t, "the new content loaded", func() bool { return len(rec.find("peer file loaded")) == 2 })
	waitChecks(t, s, 10)
	check("after new content", 4, 2)
	if last := rec.find("invalid peer line")[3]; last.attrs["line"] != "2" || last.attrs["text"] != "x,y" {
		t.Errorf("new bad line logged as %v, want line 2, text x,y", last.attrs)
	}
}

// TestPeerCap: a peer file listing more than maxPeers peers gets the first maxPeers pinged and
// given series, the rest counted as invalid lines, and the log names the first
// maxLoggedLineErrors of them and counts the others in one record.
func TestPeerCap(t *testing.T) {
	const extra = maxLoggedLineErrors + 12
	// Distinct loopback addresses on a closed port: every ping is refused at once.
	port := closedPort(t).Port
	var content strings.Builder
	var peers []Peer
	for i := range maxPeers + extra {
		p := Peer{fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250), port}
		peers = append(peers, p)
		content.WriteString(line(p))
	}
	s, rec := newServer(t, Options{Interval: time.Hour, Timeout: 2 * time.Second})
	writePeerFile(t, s.opts.ConfigPath, content.String())
	start(t, s, rec)
	waitFor(t, "the first round", func() bool { return s.Rounds() == 1 && len(s.LastResults()) >= maxPeers })

	results := s.LastResults()
	for i, p := range peers {
		if _, pinged := results[p]; pinged != (i < maxPeers) {
			t.Errorf("peer %d (%s) pinged = %v, want %v", i+1, p, pinged, i < maxPeers)
		}
	}
	page := scrape(t, s)
	series := 0
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, metricPings+"{") {
			series++
		}
	}
	if series != 2*maxPeers {
		t.Errorf("%d series of %s, want %d (success and failure of each peer pinged)", series, metricPings, 2*maxPeers)
	}
	if v, _ := metricValue(page, metricPeers, nil); v != maxPeers {
		t.Errorf("%s = %v, want %d", metricPeers, v, maxPeers)
	}
	if v, _ := metricValue(page, metricInvalid, nil); v != extra {
		t.Errorf("%s = %v, want %d", metricInvalid, v, extra)
	}

	logged := rec.find("invalid peer line")
	if len(logged) != maxLoggedLineErrors {
		t.Fatalf("%d \"invalid peer line\" logs, want %d", len(logged), maxLoggedLineErrors)
	}
	if first := logged[0].attrs; first["line"] != strconv.Itoa(maxPeers+1) || first["reason"] != reasonTooMany {
		t.Errorf("first invalid line logged as %v, want line %d with reason %q", first, maxPeers+1, reasonTooMany)
	}
	rest := rec.find("more invalid peer lines not logged")
	if len(rest) != 1 || rest[0].attrs["count"] != strconv.Itoa(extra-maxLoggedLineErrors) ||
		rest[0].attrs["from_line"] != strconv.Itoa(maxPeers+maxLoggedLineErrors+1) {
		t.Errorf("the lines not logged were logged as %v, want one record counting %d from line %d",
			rest, extra-maxLoggedLineErrors, maxPeers+maxLoggedLineErrors+1)
	}
}

func TestMissingPeerFileAppearsLater(t *testing.T) {
	a := pongServer(t, "a")
	s, rec := startServer(t, Options{Interval: time.Hour})
	waitFor(t, "/readyz 200 with no peer file", func() bool {
		code, _ := get(t, baseURL(s)+"/readyz")
		return code == http.StatusOK
	})
	waitChecks(t, s, 20)
	if n := len(rec.find("peer file missing")); n != 1 {
		t.Errorf("\"peer file missing\" logged %d times over 20 checks, want 1", n)
	}
	if n := s.Rounds(); n != 0 {
		t.Errorf("rounds = %d with no peer file, want 0", n)
	}

	writePeerFile(t, s.opts.ConfigPath, line(a))
	waitResult(t, s, a, "a pinged once the file appears", succeeded)

	if err := os.Remove(s.opts.ConfigPath); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the removal noticed", func() bool { return len(rec.find("peer file missing")) == 2 })
	waitChecks(t, s, 10)
	if n := len(rec.find("peer file missing")); n != 2 {
		t.Errorf("\"peer file missing\" logged %d times, want 2 (start, removal)", n)
	}
	if res := s.LastResults(); len(res) != 0 {
		t.Errorf("results after the file was removed: %v, want none", res)
	}
	if v, _ := metricValue(scrape(t, s), metricPeers, nil); v != 0 {
		t.Errorf("%s = %v after removal, want 0", metricPeers, v)
	}
}

func TestUnreadablePeerFileLoggedOnce(t *testing.T) {
	// A directory where the file should be: open works, read fails (EISDIR), even as root.
	path := filepath.Join(t.TempDir(), "hostports")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	s, rec := startServer(t, Options{ConfigPath: path})
	waitChecks(t, s, 20)
	errs := rec.find("read peer file failed")
	if len(errs) != 1 {
		t.Fatalf("\"read peer file failed\" logged %d times over 20 checks, want 1", len(errs))
	}
	if errs[0].attrs["error"] == "" || errs[0].attrs["path"] != path {
		t.Errorf("logged %v, want the path and the error", errs[0].attrs)
	}
	if code, _ := get(t, baseURL(s)+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d, want 200: the file has been checked", code)
	}
}
