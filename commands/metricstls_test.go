package commands

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/util/cert"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestMetricsCertReloaded: with --metrics-cert-dir the server presents the directory's pair,
// verified by a client that trusts only it, and after the files change (a renewal) the new
// pair without a restart; a pair that does not load keeps the last good one. A directory
// without a pair is an error at start.
func TestMetricsCertReloaded(t *testing.T) {
	dir := t.TempDir()
	write := func(crt, key []byte) {
		t.Helper()
		// As the kubelet does: new files, then the names; a distinct time for each version.
		for name, b := range map[string][]byte{"tls.crt": crt, "tls.key": key} {
			tmp := filepath.Join(dir, "."+name)
			if err := os.WriteFile(tmp, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	newPair := func() ([]byte, []byte) {
		t.Helper()
		crt, key, err := cert.GenerateSelfSignedCertKey("127.0.0.1", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return crt, key
	}
	if _, err := metricsTLS(dir); err == nil {
		t.Fatal("metricsTLS of a directory without a pair succeeded")
	}
	crtA, keyA := newPair()
	write(crtA, keyA)
	tc, err := metricsTLS(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := testenv.FreeAddr(t)
	serveTLS(ctx, addr, "/metrics", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}), tc)
	// get succeeds only when the server presents a certificate of crt (which carries its own
	// CA for the self-signed pair); the server name is the certificate's.
	get := func(crt []byte) error {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(crt)
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12},
		}}
		resp, err := client.Get("https://" + addr + "/metrics")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for get(crtA) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the server does not present the directory's certificate: %v", get(crtA))
		}
		time.Sleep(50 * time.Millisecond)
	}
	crtB, keyB := newPair()
	time.Sleep(10 * time.Millisecond) // another modification time
	write(crtB, keyB)
	if err := get(crtB); err != nil {
		t.Errorf("after the renewal: %v, want the new certificate", err)
	}
	if get(crtA) == nil {
		t.Error("after the renewal the old certificate is still served")
	}
	write([]byte("not a certificate"), keyB)
	if err := get(crtB); err != nil {
		t.Errorf("after a broken update: %v, want the last good certificate", err)
	}
}
