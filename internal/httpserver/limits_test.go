package httpserver

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConnectionLimit: with MaxConnections connections held open by clients that send nothing,
// the next request waits (it is not accepted) until one of them goes, then is answered. The
// zero Options hold DefaultMaxConnections.
func TestConnectionLimit(t *testing.T) {
	for name, limit := range map[string]int{"default": 0, "three": 3} {
		t.Run(name, func(t *testing.T) {
			s, _ := startServer(t, Options{MaxConnections: limit})
			held := limit
			if held == 0 {
				held = DefaultMaxConnections
			}
			var conns []net.Conn
			t.Cleanup(func() {
				for _, c := range conns {
					c.Close()
				}
			})
			for range held {
				c, err := net.Dial("tcp", s.Addr().String())
				if err != nil {
					t.Fatalf("connection %d: %v", len(conns)+1, err)
				}
				conns = append(conns, c)
			}
			client := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			if resp, err := client.Get(baseURL(s) + "/ping"); err == nil {
				resp.Body.Close()
				t.Fatalf("a request beside %d open connections was answered (%s), want it to wait", held, resp.Status)
			}
			conns[0].Close()
			client.Timeout = waitTimeout
			resp, err := client.Get(baseURL(s) + "/ping")
			if err != nil {
				t.Fatalf("after one connection closed: %v, want an answer", err)
			}
			resp.Body.Close()
		})
	}
}

// TestSlowAndLargeRequests: a client that sends its request line and then nothing is cut off
// after ReadTimeout; a kept-alive connection without a next request after IdleTimeout; a
// header over MaxHeaderBytes (and net/http's 4 KiB of slack) gets 431.
func TestSlowAndLargeRequests(t *testing.T) {
	s, _ := startServer(t, Options{ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond, MaxHeaderBytes: 1024})
	closedWithin := func(t *testing.T, c net.Conn, r *bufio.Reader, d time.Duration) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.Copy(io.Discard, r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection is still open after %v", d)
		}
	}
	t.Run("slow header", func(t *testing.T) {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, bufio.NewReader(c), 3*time.Second)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		c, err := net.Dial("tcp", s.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /ping HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		closedWithin(t, c, r, 3*time.Second)
	})
	t.Run("large header", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodGet, baseURL(s)+"/ping", nil)
		req.Header.Set("X-Big", strings.Repeat("a", 8<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("a 8 KiB header: %s, want 431", resp.Status)
		}
	})
}

// TestLimitDefaults: the zero Options serve with the Default* timeouts and header limit.
func TestLimitDefaults(t *testing.T) {
	s, _ := newServer(t, Options{})
	defer s.Close()
	h := s.http
	if h.ReadTimeout != DefaultReadTimeout || h.WriteTimeout != DefaultWriteTimeout || h.IdleTimeout != DefaultIdleTimeout ||
		h.MaxHeaderBytes != DefaultMaxHeaderBytes || h.ReadHeaderTimeout <= 0 || h.ReadHeaderTimeout > DefaultReadTimeout {
		t.Errorf("http.Server read %v (header %v), write %v, idle %v, header bytes %d: want the defaults",
			h.ReadTimeout, h.ReadHeaderTimeout, h.WriteTimeout, h.IdleTimeout, h.MaxHeaderBytes)
	}
}
