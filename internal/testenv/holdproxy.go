package testenv

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// HoldingProxy is the cluster's API server behind a proxy on 127.0.0.1 that holds back the
// response to every request a rule matches until Release, or until the caller gives up: the
// request itself reaches the API server at once, so the object it writes exists while its
// writer still waits for the answer. It is a slow network between a client and the API
// server, a fault real clusters produce and a real part cannot be made to produce on demand;
// tests use it to keep a Pulumi run in the middle of an operation (no object of the program is
// awaited, so nothing else holds a run open).
type HoldingProxy struct {
	// Kubeconfig is a kubeconfig for the proxy, with the cluster's credentials.
	Kubeconfig string

	hold    func(*http.Request) bool
	mu      sync.Mutex
	release chan struct{}
	held    atomic.Int64
	total   atomic.Int64
}

// HoldingProxy starts a proxy in front of c whose responses to requests hold matches are held
// (see HoldingProxy); it stops when the test ends, releasing what it holds.
func (c *Cluster) HoldingProxy(t testing.TB, hold func(*http.Request) bool) *HoldingProxy {
	t.Helper()
	target, err := url.Parse(c.Config.Host)
	if err != nil {
		t.Fatalf("API server URL %q: %v", c.Config.Host, err)
	}
	transport, err := rest.TransportFor(c.Config)
	if err != nil {
		t.Fatalf("transport to the API server: %v", err)
	}
	p := &HoldingProxy{hold: hold, release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	rp.ModifyResponse = func(resp *http.Response) error {
		if !p.hold(resp.Request) {
			return nil
		}
		p.total.Add(1)
		p.held.Add(1)
		defer p.held.Add(-1)
		p.mu.Lock()
		release := p.release
		p.mu.Unlock()
		select {
		case <-release:
			return nil
		case <-resp.Request.Context().Done():
			return context.Cause(resp.Request.Context())
		}
	}
	srv := httptest.NewTLSServer(rp)
	t.Cleanup(func() {
		p.Release()
		srv.Close()
	})
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatalf("load kubeconfig %s: %v", c.Kubeconfig, err)
	}
	for _, cl := range raw.Clusters {
		cl.Server = srv.URL
		cl.CertificateAuthority, cl.CertificateAuthorityData = "", nil
		cl.InsecureSkipTLSVerify = true // the proxy's certificate is httptest's own
	}
	p.Kubeconfig = filepath.Join(t.TempDir(), "proxy-kubeconfig")
	if err := clientcmd.WriteToFile(*raw, p.Kubeconfig); err != nil {
		t.Fatal(err)
	}
	return p
}

// Release lets every held response through, and those that come later too.
func (p *HoldingProxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.release:
	default:
		close(p.release)
	}
}

// Held is how many responses the proxy holds now; Total how many it has held in all.
func (p *HoldingProxy) Held() int64  { return p.held.Load() }
func (p *HoldingProxy) Total() int64 { return p.total.Load() }
