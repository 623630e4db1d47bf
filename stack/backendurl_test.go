package stack

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestParseBackend: the backend URLs the operator accepts, and what it says about those it
// refuses. Schemes other than file:// go to the pulumi CLI unchanged (gs://, azblob:// and
// Pulumi Cloud are documented pass-throughs: nothing here can reach them); a file:// backend's
// directory is made absolute, and not created.
func TestParseBackend(t *testing.T) {
	dir := t.TempDir()
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		raw     string
		kind    BackendKind
		want    string // Backend.String
		dir     string // Backend.Dir
		gone    bool   // run in a current directory that was removed
		wantErr string
		is      error // the error wraps it
	}{
		"file":                  {raw: "file://" + dir + "/state", kind: BackendFile, want: "file://" + dir + "/state", dir: dir + "/state"},
		"file on localhost":     {raw: "file://localhost" + dir, kind: BackendFile, want: "file://" + dir, dir: dir},
		"file, relative":        {raw: "file://state/here", kind: BackendFile, want: "file://" + cwd + "/state/here", dir: cwd + "/state/here"},
		"file, scheme in caps":  {raw: "FILE://" + dir, kind: BackendFile, want: "file://" + dir, dir: dir},
		"postgres":              {raw: "postgres://u@db:5432/pulumi?sslmode=require", kind: BackendPostgres, want: "postgres://u@db:5432/pulumi?sslmode=require"},
		"postgresql":            {raw: "postgresql://u@db/pulumi", kind: BackendPostgres, want: "postgresql://u@db/pulumi"},
		"s3 with endpoint":      {raw: "s3://b?endpoint=127.0.0.1:9000&s3ForcePathStyle=true", kind: BackendS3, want: "s3://b?endpoint=127.0.0.1:9000&s3ForcePathStyle=true"},
		"pulumi cloud":          {raw: "https://api.pulumi.com", kind: BackendCloud, want: "https://api.pulumi.com"},
		"self-hosted, http":     {raw: "http://127.0.0.1:8080", kind: BackendCloud, want: "http://127.0.0.1:8080"},
		"gcs":                   {raw: "gs://my-bucket/pulumi", kind: BackendOtherDIY, want: "gs://my-bucket/pulumi"},
		"azure blob":            {raw: "azblob://state?storage_account=acct", kind: BackendOtherDIY, want: "azblob://state?storage_account=acct"},
		"empty":                 {raw: "", wantErr: "empty backend URL: want file:///dir"},
		"no scheme":             {raw: "my-bucket", wantErr: "want file:///dir, postgres://"},
		"a path, no URL":        {raw: "/just/a/dir", wantErr: "want file:///dir, postgres://"},
		"unparsable":            {raw: "::postgres://u:hunter2@h/db", wantErr: `backend URL "(unparsable URL)": want file:///dir`},
		"file without dir":      {raw: "file://", wantErr: "names no directory: want file:///dir"},
		"relative, no cwd":      {raw: "file://state", gone: true, wantErr: `backend directory "state"`},
		"absolute, cwd removed": {raw: "file:///abs", gone: true, kind: BackendFile, want: "file:///abs", dir: "/abs"},
		// Credentials in the URL: refused, saying where they go, never showing them.
		"postgres password": {raw: "postgres://u:hunter2@db:5432/pulumi", wantErr: "remove it from the URL and give it in PGPASSWORD", is: ErrCredentialsInURL},
		"postgres password parameter": {raw: "postgres://u@db/pulumi?sslmode=require&password=hunter2",
			wantErr: "backend URL holds a credential: postgres://u@db/pulumi?sslmode=require&password=xxxxx", is: ErrCredentialsInURL},
		"s3 secret key": {raw: "s3://b?endpoint=h&secret_key=hunter2", wantErr: "AWS_SECRET_ACCESS_KEY", is: ErrCredentialsInURL},
		"azure sas":     {raw: "azblob://c?sig=hunter2", wantErr: "AZURE_STORAGE_SAS_TOKEN", is: ErrCredentialsInURL},
		"gcs password":  {raw: "gs://u:hunter2@b", wantErr: "the backend's own environment variable", is: ErrCredentialsInURL},
		"file password": {raw: "file://u:hunter2@localhost/state", wantErr: "the backend's own environment variable", is: ErrCredentialsInURL},
	} {
		t.Run(name, func(t *testing.T) {
			if tc.gone {
				gone := t.TempDir()
				t.Chdir(gone)
				if err := os.Remove(gone); err != nil {
					t.Fatal(err)
				}
			}
			b, err := ParseBackend(tc.raw)
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the credential: %v", err)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseBackend(%q) = %+v, %v; want an error containing %q", tc.raw, b, err, tc.wantErr)
				}
				if tc.is != nil && !errors.Is(err, tc.is) {
					t.Fatalf("ParseBackend(%q) = %v, want one that is %v", tc.raw, err, tc.is)
				}
				return
			}
			if err != nil || b.Kind != tc.kind || b.String() != tc.want || b.Dir != tc.dir {
				t.Fatalf("ParseBackend(%q) = kind %d, %q, dir %q, %v; want kind %d, %q, dir %q", tc.raw, b.Kind, b.String(), b.Dir, err, tc.kind, tc.want, tc.dir)
			}
			if b.URL == nil || b.URL.Scheme != strings.ToLower(strings.SplitN(tc.raw, ":", 2)[0]) {
				t.Fatalf("ParseBackend(%q).URL = %v, want the URL parsed", tc.raw, b.URL)
			}
			if b.Kind == BackendFile && b.URL.Path != b.Dir {
				t.Fatalf("ParseBackend(%q).URL = %v, want file://%s", tc.raw, b.URL, b.Dir)
			}
		})
	}
	if _, err := os.Stat(dir + "/state"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ParseBackend made the file backend's directory (%v): only New does", err)
	}
}

// TestNewMakesFileBackend: New creates a file:// backend's directory, and the Manager reports
// it (Manager.FileBackendDir) and hands the CLI the absolute URL.
func TestNewMakesFileBackend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "here")
	m, err := New(Config{Project: "p", BackendURL: "file://" + dir, WorkRoot: t.TempDir(), PulumiPath: testenv.PulumiCLI(t),
		ClusterName: "c", Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("file backend directory not created: %v", err)
	}
	if got := m.FileBackendDir(); got != dir {
		t.Errorf("FileBackendDir = %q, want %q", got, dir)
	}
	if got := m.cliEnv()["PULUMI_BACKEND_URL"]; got != "file://"+dir {
		t.Errorf("PULUMI_BACKEND_URL = %q, want file://%s", got, dir)
	}
}

// A PostgreSQL backend's connections carry the operator's host name as their application_name
// (PGAPPNAME); another backend, or a PGAPPNAME already set, gets none.
func TestPostgresAppName(t *testing.T) {
	host, _ := os.Hostname()
	for name, tc := range map[string]struct {
		url, env, want string
	}{
		"postgres":             {"postgres://u@db:5432/p?sslmode=disable", "", "pulumi-operator@" + host},
		"postgresql":           {"postgresql://u@db/p", "", "pulumi-operator@" + host},
		"file":                 {"file:///state", "", ""},
		"s3":                   {"s3://bucket", "", ""},
		"PGAPPNAME set by you": {"postgres://u@db/p", "mine", ""},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("PGAPPNAME", tc.env)
			if tc.env == "" {
				os.Unsetenv("PGAPPNAME")
			}
			b, err := ParseBackend(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			if got := postgresAppName(b); got != tc.want {
				t.Errorf("postgresAppName(%q) = %q, want %q", tc.url, got, tc.want)
			}
		})
	}
}
