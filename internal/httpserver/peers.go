package httpserver

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Peer is one destination from the peer file: the server pings http://Host:Port/ping.
type Peer struct {
	// Host is a DNS name or an IP address (IPv6 without brackets), never empty.
	Host string
	// Port is the TCP port, 1 to 65535.
	Port int
}

// String returns the peer as host:port (IPv6 hosts in brackets); it is the "peer" label of
// the metrics and the "peer" attribute of the logs.
func (p Peer) String() string {
	return net.JoinHostPort(p.Host, strconv.Itoa(p.Port))
}

// URL returns the address pinged: http://host:port/ping.
func (p Peer) URL() string {
	return "http://" + p.String() + "/ping"
}

// maxPeers is the most peers pinged: the first maxPeers valid lines of the peer file. Each
// peer has series of its own on /metrics (two of http_server_peer_pings_total and a histogram of
// len(prometheus.DefBuckets)+3 in http_server_peer_ping_duration_seconds), so the cap bounds what
// every pod exposes and Prometheus stores whatever the file holds (the file alone allows tens of
// thousands of lines): 16 series a peer, 4096 at the cap. It also bounds a round: with every
// peer unreachable it lasts ceil(maxPeers/maxConcurrentPings) timeouts. 256 is far more than
// the few peers a server checks (the original operator's sample lists one).
const maxPeers = 256

// Reasons a peer file line is rejected, the Reason of a LineError.
const (
	reasonNoComma   = "missing comma between host and port"
	reasonEmptyHost = "empty host"
	reasonBadHost   = "host contains white space or one of / ? # @ \\"
	reasonBadPort   = "port is not a number from 1 to 65535"
	reasonDuplicate = "duplicate peer"
	reasonTooMany   = "more than 256 peers, not pinged"
)

// LineError is one invalid line of the peer file.
type LineError struct {
	// Line is the 1-based line number in the file.
	Line int
	// Text is the line as written, trimmed of surrounding white space.
	Text string
	// Reason says what is wrong, in a few fixed words.
	Reason string
}

// Error implements error: "line N: reason: text".
func (e LineError) Error() string {
	return fmt.Sprintf("line %d: %s: %q", e.Line, e.Reason, e.Text)
}

// ParsePeers reads a peer file: one "host,port" a line. Lines are split on '\n' and trimmed
// (so CRLF files work); blank lines and lines starting with '#' are skipped. The line is split
// on its first comma, as the original server did; host and port are trimmed. The host must be
// non-empty and free of characters that would change the URL; the port a decimal number from
// 1 to 65535. A repeated host:port is reported once more as a duplicate and pinged once. Valid
// lines past the first maxPeers peers are reported as too many and not pinged.
//
// It returns the valid peers in file order, at most maxPeers, and one LineError per invalid
// line; both may be empty. It never fails as a whole: good lines are used even when others
// are bad.
func ParsePeers(data []byte) ([]Peer, []LineError) {
	var (
		peers []Peer
		bad   []LineError
		seen  = map[Peer]bool{}
	)
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, reason := parsePeerLine(line)
		switch {
		case reason != "":
		case seen[p]:
			reason = reasonDuplicate
		case len(peers) == maxPeers:
			reason = reasonTooMany
		}
		if reason != "" {
			bad = append(bad, LineError{Line: i + 1, Text: line, Reason: reason})
			continue
		}
		seen[p] = true
		peers = append(peers, p)
	}
	return peers, bad
}

// parsePeerLine parses one trimmed, non-blank line; reason is empty when it is valid.
func parsePeerLine(line string) (p Peer, reason string) {
	host, port, ok := strings.Cut(line, ",")
	if !ok {
		return Peer{}, reasonNoComma
	}
	host = strings.TrimSpace(host)
	// Accept "[::1]" as well as "::1": JoinHostPort adds the brackets back.
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" {
		return Peer{}, reasonEmptyHost
	}
	if strings.ContainsAny(host, " \t/?#@\\") {
		return Peer{}, reasonBadHost
	}
	// ParseUint rejects signs and white space inside the number; bitSize 16 caps it at 65535.
	n, err := strconv.ParseUint(strings.TrimSpace(port), 10, 16)
	if err != nil || n == 0 {
		return Peer{}, reasonBadPort
	}
	return Peer{Host: host, Port: int(n)}, ""
}
