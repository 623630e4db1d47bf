package stack

import (
	"os"
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	long63 := strings.Repeat("n", 63)
	tests := map[string]struct {
		cluster, ns, name string
		want              string
		wantErr           string
	}{
		"plain":              {cluster: "c1", ns: "peerns", name: "kindcustomhttp-sample", want: "c1.peerns.kindcustomhttp-sample"},
		"other namespace":    {cluster: "c1", ns: "other", name: "kindcustomhttp-sample", want: "c1.other.kindcustomhttp-sample"},
		"other cluster":      {cluster: "c2", ns: "peerns", name: "kindcustomhttp-sample", want: "c2.peerns.kindcustomhttp-sample"},
		"bad cluster":        {cluster: "C_1", ns: "a", name: "b", wantErr: "cluster name"},
		"empty namespace":    {cluster: "c", ns: "", name: "b", wantErr: "namespace"},
		"name with dot":      {cluster: "c", ns: "a", name: "b.c", wantErr: "name"},
		"exactly 100":        {cluster: strings.Repeat("c", 34), ns: "a", name: long63, want: strings.Repeat("c", 34) + ".a." + long63},
		"too long is hashed": {cluster: "c1", ns: long63, name: long63},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Name(tc.cluster, tc.ns, tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Name error = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > MaxStackNameLength {
				t.Fatalf("Name = %q: %d characters, over Pulumi's %d", got, len(got), MaxStackNameLength)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("Name = %q, want %q", got, tc.want)
			}
			again, _ := Name(tc.cluster, tc.ns, tc.name)
			if again != got {
				t.Fatal("Name is not stable")
			}
		})
	}
}

// Long names that share their first 83 characters must still get different stacks.
func TestNameHashKeepsLongNamesApart(t *testing.T) {
	prefix := strings.Repeat("n", 60)
	a, _ := Name("c1", strings.Repeat("s", 63), prefix+"aaa")
	b, _ := Name("c1", strings.Repeat("s", 63), prefix+"bbb")
	if a == b {
		t.Fatalf("two CRs share stack %q", a)
	}
	if !strings.HasPrefix(a, "c1.sss") {
		t.Fatalf("hashed name %q lost its readable prefix", a)
	}
}

// TestPrepareBackend: the backend URLs the operator accepts. Schemes other than file:// go
// to the pulumi CLI unchanged (gs://, azblob:// and Pulumi Cloud are documented pass-throughs:
// nothing here can reach them); a file:// backend's directory is made absolute and created.
func TestPrepareBackend(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		raw, want, wantErr string
	}{
		"gcs":              {raw: "gs://my-bucket/pulumi", want: "gs://my-bucket/pulumi"},
		"azure blob":       {raw: "azblob://state?storage_account=acct", want: "azblob://state?storage_account=acct"},
		"pulumi cloud":     {raw: "https://api.pulumi.com", want: "https://api.pulumi.com"},
		"postgres":         {raw: "postgres://u@db:5432/pulumi?sslmode=require", want: "postgres://u@db:5432/pulumi?sslmode=require"},
		"s3 with endpoint": {raw: "s3://b?endpoint=127.0.0.1:9000&s3ForcePathStyle=true", want: "s3://b?endpoint=127.0.0.1:9000&s3ForcePathStyle=true"},
		"file":             {raw: "file://" + dir + "/state", want: "file://" + dir + "/state"},
		"empty":            {raw: "", wantErr: "empty backend URL"},
		"no scheme":        {raw: "my-bucket", wantErr: "want file:///dir, postgres://"},
		"file without dir": {raw: "file://", wantErr: "names no directory"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := prepareBackend(tc.raw)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("prepareBackend(%q) = %q, %v; want an error containing %q", tc.raw, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("prepareBackend(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
			}
		})
	}
	if fi, err := os.Stat(dir + "/state"); err != nil || !fi.IsDir() {
		t.Errorf("file backend directory not created: %v", err)
	}
}

// TestBackendUnavailable: the CLI errors that mean "the state backend cannot be reached or
// opened" (retried with a short backoff, reason BackendUnavailable), as the CLI v3.255.0
// prints them, and errors that do not.
func TestBackendUnavailable(t *testing.T) {
	for msg, want := range map[string]bool{
		`error: unable to open bucket postgres://pulumi:xxxxx@127.0.0.1:34939/pulumi?sslmode=disable: failed to ping PostgreSQL: dial tcp 127.0.0.1:34939: connect: connection refused`:                                                                                                                                                                                            true,
		`error: unable to open bucket postgres://pulumi:xxxxx@127.0.0.1:35442/pulumi: failed to ping PostgreSQL: pq: password authentication failed for user "pulumi" (28P01)`:                                                                                                                                                                                                     true,
		`error: read ".pulumi/meta.yaml": blob (key ".pulumi/meta.yaml") (code=Unknown): operation error S3: GetObject, exceeded maximum number of attempts, 3, https response error StatusCode: 0, RequestID: , HostID: , request send failed, Get "http://127.0.0.1:42759/pulumi-state/.pulumi/meta.yaml?x-id=GetObject": dial tcp 127.0.0.1:42759: connect: connection refused`: true,
		`error: the stack is currently locked by 1 lock(s).`: false,
		`error: resource "urn:pulumi:s::p::kubernetes:apps/v1:Deployment::deployment" was not successfully created by the Kubernetes API server: dial tcp 127.0.0.1:6443: connect: connection refused`: false,
	} {
		if got := backendUnavailable(msg); got != want {
			t.Errorf("backendUnavailable(%.60q...) = %v, want %v", msg, got, want)
		}
	}
}
