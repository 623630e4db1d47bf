package httpserver

import (
	"reflect"
	"testing"
)

func TestParsePeers(t *testing.T) {
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
