package httpserver

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// peerLines returns n peer lines "peer-<from+i>,80" and their peers.
func peerLines(from, n int) (string, []Peer) {
	var b strings.Builder
	var peers []Peer
	for i := from; i < from+n; i++ {
		fmt.Fprintf(&b, "peer-%d,80\n", i)
		peers = append(peers, Peer{fmt.Sprintf("peer-%d", i), 80})
	}
	return b.String(), peers
}

func TestParsePeers(t *testing.T) {
	capLines, capPeers := peerLines(0, maxPeers)
	tests := map[string]struct {
		in    string
		peers []Peer
		bad   []LineError
	}{
		"empty file": {in: ""},
		"one peer, no final newline": {
			in:    "peer-a,8080",
			peers: []Peer{{"peer-a", 8080}},
		},
		"blank lines, comments, CRLF and spaces": {
			in:    "\n  # peers of web\r\n peer-a , 8080 \r\n\r\n\t10.0.0.7,80\n",
			peers: []Peer{{"peer-a", 8080}, {"10.0.0.7", 80}},
		},
		"split on the first comma only": {
			in:  "a,80,81\n",
			bad: []LineError{{1, "a,80,81", reasonBadPort}},
		},
		"every kind of bad line, good lines kept": {
			in:    "nocomma\n,80\nhost,abc\nhost,0\nhost,65536\nhost,-1\nhost,+80\nhost,\nbad host,80\nh/x,80\nok,65535\n",
			peers: []Peer{{"ok", 65535}},
			bad: []LineError{
				{1, "nocomma", reasonNoComma},
				{2, ",80", reasonEmptyHost},
				{3, "host,abc", reasonBadPort},
				{4, "host,0", reasonBadPort},
				{5, "host,65536", reasonBadPort},
				{6, "host,-1", reasonBadPort},
				{7, "host,+80", reasonBadPort},
				{8, "host,", reasonBadPort},
				{9, "bad host,80", reasonBadHost},
				{10, "h/x,80", reasonBadHost},
			},
		},
		"duplicate": {
			in:    "a,1\nb,2\na,1\n",
			peers: []Peer{{"a", 1}, {"b", 2}},
			bad:   []LineError{{3, "a,1", reasonDuplicate}},
		},
		"IPv6 with or without brackets": {
			in:    "::1,80\n[fe80::1],81\n",
			peers: []Peer{{"::1", 80}, {"fe80::1", 81}},
		},
		"maxPeers peers, all pinged": {
			in:    capLines,
			peers: capPeers,
		},
		"the peer past maxPeers not pinged": {
			in:    capLines + "# more\n\nlast,80\n",
			peers: capPeers,
			bad:   []LineError{{maxPeers + 3, "last,80", reasonTooMany}},
		},
		// Only peers pinged count: bad lines and duplicates before the cap take no place.
		"bad lines and duplicates do not count toward maxPeers": {
			in:    "peer-0,80\nnocomma\n" + capLines,
			peers: capPeers,
			bad:   []LineError{{2, "nocomma", reasonNoComma}, {3, "peer-0,80", reasonDuplicate}},
		},
		"past maxPeers a bad line keeps its reason, a pinged peer is a duplicate": {
			in:    capLines + "x\npeer-1,80\nnew,80\n",
			peers: capPeers,
			bad: []LineError{
				{maxPeers + 1, "x", reasonNoComma},
				{maxPeers + 2, "peer-1,80", reasonDuplicate},
				{maxPeers + 3, "new,80", reasonTooMany},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			peers, bad := ParsePeers([]byte(tc.in))
			if !reflect.DeepEqual(peers, tc.peers) {
				t.Errorf("peers = %v, want %v", peers, tc.peers)
			}
			if !reflect.DeepEqual(bad, tc.bad) {
				t.Errorf("bad lines = %v, want %v", bad, tc.bad)
			}
		})
	}
}

// The reason of a line past the cap states the cap (a constant cannot be built from maxPeers).
func TestReasonTooManyNamesTheCap(t *testing.T) {
	if !strings.Contains(reasonTooMany, " "+strconv.Itoa(maxPeers)+" ") {
		t.Fatalf("reasonTooMany %q does not say %d", reasonTooMany, maxPeers)
	}
}

func TestPeerURL(t *testing.T) {
	tests := map[string]struct {
		peer Peer
		want string
	}{
		"name": {Peer{"peer-a.ns.svc", 8080}, "http://peer-a.ns.svc:8080/ping"},
		"ipv4": {Peer{"127.0.0.1", 80}, "http://127.0.0.1:80/ping"},
		"ipv6": {Peer{"::1", 80}, "http://[::1]:80/ping"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tc.peer.URL(); got != tc.want {
				t.Errorf("URL() = %q, want %q", got, tc.want)
			}
		})
	}
}
