package stack

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// The tests here run the Manager against the postgres:// and s3:// backends, each a real server
// on 127.0.0.1 started by the project's own scripts:
//
//	eval "$(hack/postgres-up.sh)"  # PULUMI_TEST_POSTGRES_URL
//	eval "$(hack/minio-up.sh)"     # PULUMI_TEST_S3_URL, PULUMI_TEST_S3_ACCESS_KEY_ID, PULUMI_TEST_S3_SECRET_ACCESS_KEY
//
// They read what the backend stores on their own (psql; signed S3 requests), not through
// Pulumi, so a pass means the state really is in that backend. Several runs may share one
// server: every Manager gets a cluster name of its own, so its stacks never meet another run's.

// stateBackend is a real backend: the URL the Manager gets, the environment the CLI needs for
// it, and direct access to what it stores.
type stateBackend struct {
	url string
	env map[string]string
	// keys lists the stored object keys that start with prefix, sorted. Keys are as the DIY
	// backend names them (".pulumi/..."), without the URL's path prefix (see objectPrefix).
	keys func(t *testing.T, prefix string) []string
	// read returns the stored bytes of key.
	read func(t *testing.T, key string) []byte
}

// objectPrefix is what the DIY backend puts before every key of a non-file backend: the URL's
// path plus "/" (pkg/backend/diy.New wraps the bucket in blob.PrefixedBucket). For
// postgres://u:p@host/pulumi that is the database name: rows are "pulumi/.pulumi/...".
func objectPrefix(u *url.URL) string {
	p := strings.TrimLeft(u.Path, "/")
	if p != "" && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}

// stacksPrefix is where a DIY backend keeps the state of the project's stacks:
// <prefix><stack>.json (pkg/backend/diy, project-scoped layout).
const stacksPrefix = ".pulumi/stacks/kindcustomhttp/"

// requireEnv returns the environment variable name, or skips the test (fails it under CI=true:
// hack/test.sh always starts the servers) saying how to get it.
func requireEnv(t *testing.T, name, how string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		missingEnv(t, name+" is not set", how)
	}
	return v
}

func missingEnv(t *testing.T, what, how string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("FAIL: %s (CI runs hack/test.sh, which must provide it: %s)", what, how)
	}
	t.Skipf("SKIP: %s: %s", what, how)
}

// backendManager returns a Manager on the real CLI and backend b, under a cluster name of its
// own, and destroys whatever stacks of it are left when the test ends (a failed test must not
// leave state in a shared server).
func backendManager(t *testing.T, b stateBackend) *Manager {
	t.Helper()
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	env := map[string]string{"PULUMI_CONFIG_PASSPHRASE": "test-passphrase"}
	maps.Copy(env, b.env)
	m, err := New(Config{
		Project:     "kindcustomhttp",
		BackendURL:  b.url,
		WorkRoot:    t.TempDir(),
		PulumiPath:  testenv.PulumiCLI(t),
		ClusterName: "bt-" + hex.EncodeToString(suffix),
		Env:         env,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if b.keys == nil {
			return
		}
		for _, k := range b.keys(t, stacksPrefix+m.cfg.ClusterName+".") {
			name, ok := strings.CutSuffix(strings.TrimPrefix(k, stacksPrefix), ".json")
			if !ok { // a backup, <stack>.json.bak
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
				t.Logf("cleanup: destroy %s: %v", name, err)
			}
			cancel()
		}
	})
	return m
}

func TestBackendPostgres(t *testing.T) { testBackend(t, postgresBackend(t)) }

func TestBackendS3(t *testing.T) { testBackend(t, s3Backend(t)) }

// testBackend runs up, a no-change up, preview, a lock left by a killed update and its removal,
// two stacks at once and destroy against b, and checks after each step what b itself holds.
func testBackend(t *testing.T, b stateBackend) {
	m := backendManager(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	name, err := m.StackName("peerns", "web")
	if err != nil {
		t.Fatal(err)
	}
	key := stacksPrefix + name + ".json"
	// The stacks' state, without the CLI's backups of the previous state (<stack>.json.bak).
	states := func() []string {
		return slices.DeleteFunc(b.keys(t, stacksPrefix+m.cfg.ClusterName+"."), func(k string) bool {
			return !strings.HasSuffix(k, ".json")
		})
	}

	up, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up: %v", err)
	}
	if up.Outputs["greeting"] != "hello" || !up.Changed() {
		t.Fatalf("up = %+v", up)
	}
	if got := states(); !slices.Equal(got, []string{key}) {
		t.Fatalf("backend holds the states %v, want [%s]", got, key)
	}
	if state := b.read(t, key); !strings.Contains(string(state), `"hello"`) {
		t.Fatalf("the stored state of %s has no output \"hello\":\n%s", name, state)
	}

	again, err := m.Up(ctx, name, program("hello", 0), RunOptions{})
	if err != nil {
		t.Fatalf("second up: %v", err)
	}
	if again.Changed() || again.Changes["same"] != 1 {
		t.Fatalf("an unchanged program: changes %v, want only 1 same", again.Changes)
	}

	// A preview changes nothing: the stored state still holds the applied output.
	if _, err := m.Preview(ctx, name, program("bye", 0), RunOptions{}); err != nil {
		t.Fatalf("preview: %v", err)
	}
	if state := b.read(t, key); !strings.Contains(string(state), `"hello"`) || strings.Contains(string(state), `"bye"`) {
		t.Fatalf("preview wrote to the stored state:\n%s", state)
	}
	if exists, err := m.Exists(ctx, name); err != nil || !exists {
		t.Fatalf("Exists = %v, %v", exists, err)
	}

	// A lock left on this backend by a killed update (a CLI process; without the engine host, so
	// that the second up meets the lock): the engine host lists it and removes it, and updates
	// work again.
	lock := killedLock(t, m, name)
	attachHost(t, m)
	if held, locks, ok := m.heldLocks(name); !ok || !held || len(locks) != 1 || !sameLock(locks[0], lock) {
		t.Fatalf("heldLocks after the kill = %v, %+v, %v; want %+v", held, locks, ok, lock)
	}
	if err := m.CancelLock(ctx, name, []string{lock.ID}, []Lock{lock}); err != nil {
		t.Fatalf("CancelLock: %v", err)
	}
	if held, locks, ok := m.heldLocks(name); !ok || held || len(locks) != 0 {
		t.Fatalf("heldLocks after CancelLock = %v, %+v, %v; want none held", held, locks, ok)
	}
	if res, err := m.Up(ctx, name, program("hello", 0), RunOptions{}); err != nil || res.Outputs["greeting"] != "hello" {
		t.Fatalf("up after CancelLock = %+v, %v", res, err)
	}

	// History pruning reaches this backend's keys: the engine host keeps the newest update's
	// history entry (an update record and its checkpoint) and deletes the older ones.
	history := func() []string { return b.keys(t, ".pulumi/history/kindcustomhttp/"+name+"/") }
	if n := len(history()); n < 4 {
		t.Fatalf("history of %s holds %d files after several updates, want at least 4", name, n)
	}
	if r, err := m.eng.request(ctx, protocol.Request{Op: protocol.OpPrune, Stack: name, Keep: 1}); err != nil || r.Code != 0 || r.Pruned == 0 {
		t.Fatalf("prune to 1 = %+v, %v; want files deleted", r, err)
	}
	if got := history(); len(got) != 2 {
		t.Fatalf("history after pruning to 1 update = %v, want 2 files (one update's record and checkpoint)", got)
	}

	// Two more stacks at once: both land in the backend, neither disturbs the other.
	var wg sync.WaitGroup
	pair := []string{"a", "b"}
	names := make([]string, len(pair))
	errs := make([]error, len(pair))
	outs := make([]string, len(pair))
	for i, n := range pair {
		names[i], _ = m.StackName("ns", n)
		wg.Go(func() {
			res, err := m.Up(ctx, names[i], program("from-"+n, 0), RunOptions{})
			errs[i], outs[i] = err, res.Outputs["greeting"]
		})
	}
	wg.Wait()
	for i, n := range pair {
		if errs[i] != nil || outs[i] != "from-"+n {
			t.Fatalf("stack %s: %q, %v", names[i], outs[i], errs[i])
		}
	}
	want := []string{key, stacksPrefix + names[0] + ".json", stacksPrefix + names[1] + ".json"}
	sort.Strings(want)
	if got := states(); !slices.Equal(got, want) {
		t.Fatalf("backend holds %v, want %v", got, want)
	}
	for i, n := range pair {
		if state := b.read(t, stacksPrefix+names[i]+".json"); !strings.Contains(string(state), `"from-`+n+`"`) {
			t.Fatalf("the stored state of %s lacks its own output:\n%s", names[i], state)
		}
	}

	// Destroy removes each stack from the backend, the two at once.
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	for i := range pair {
		wg.Go(func() { _, errs[i] = m.Destroy(ctx, names[i], RunOptions{}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	if got := states(); len(got) != 0 {
		t.Fatalf("destroy left stack state %v", got)
	}
	if exists, err := m.Exists(ctx, name); err != nil || exists {
		t.Fatalf("after destroy Exists = %v, %v", exists, err)
	}
	if res, err := m.Destroy(ctx, name, RunOptions{}); err != nil || !res.StackMissing {
		t.Fatalf("destroy of a removed stack = %+v, %v; want StackMissing and no error", res, err)
	}
}

// The password of a postgres:// backend comes from the environment (PGPASSWORD, read by the
// driver), never the URL (New refuses one with a password): the workspace's Pulumi.yaml names no
// backend at all (the CLI reads PULUMI_BACKEND_URL), so nothing of the backend rests there.
func TestBackendPostgresPasswordFromEnv(t *testing.T) {
	b := postgresBackend(t)
	password := b.env["PGPASSWORD"]
	if password == "" {
		t.Fatal("PULUMI_TEST_POSTGRES_URL has no password (hack/postgres-up.sh always sets one)")
	}
	m := backendManager(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name, _ := m.StackName("ns", "pgpassword")
	if _, err := m.Up(ctx, name, program("env", 0), RunOptions{}); err != nil {
		t.Fatalf("up with the password in PGPASSWORD: %v", err)
	}
	if got := b.keys(t, stacksPrefix+name+"."); !slices.Contains(got, stacksPrefix+name+".json") {
		t.Fatalf("backend holds %v, want the state of %s", got, name)
	}
	pulumiYAML, err := os.ReadFile(filepath.Join(m.cfg.WorkRoot, name, "Pulumi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(pulumiYAML), password) || strings.Contains(string(pulumiYAML), "backend") {
		t.Fatalf("the workspace's Pulumi.yaml names the backend or holds its password:\n%s", pulumiYAML)
	}
	if _, err := m.Destroy(ctx, name, RunOptions{}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
}

// TestBackendDown: a backend that cannot be reached fails the operation with an error that
// says which backend and where, and never shows the backend's password or secret key.
func TestBackendDown(t *testing.T) {
	const secret = "hunter2-backend-secret"
	port := unusedPort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	tests := map[string]struct {
		backend stateBackend
		want    []string
	}{
		"postgres": {
			backend: stateBackend{url: "postgres://pulumi@" + addr + "/pulumi?sslmode=disable&connect_timeout=5",
				env: map[string]string{"PGPASSWORD": secret}},
			want: []string{"PostgreSQL", addr},
		},
		"s3": {
			backend: stateBackend{
				url: "s3://pulumi-state?endpoint=http://" + addr + "&region=us-east-1&use_path_style=true",
				env: s3Env(t, "pulumi", secret),
			},
			want: []string{"S3", addr},
		},
	}
	if raw := os.Getenv("PULUMI_TEST_POSTGRES_URL"); raw != "" {
		// The real server, with a wrong password.
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("PULUMI_TEST_POSTGRES_URL: %v", err)
		}
		u.User = url.User(u.User.Username())
		tests["postgres wrong password"] = struct {
			backend stateBackend
			want    []string
		}{stateBackend{url: u.String(), env: map[string]string{"PGPASSWORD": secret}}, []string{"PostgreSQL", "password authentication failed"}}
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := backendManager(t, tc.backend)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			stack, _ := m.StackName("ns", "down")
			start := time.Now()
			_, err := m.Up(ctx, stack, program("x", 0), RunOptions{})
			if err == nil {
				t.Fatal("up against a backend that is down succeeded")
			}
			t.Logf("after %v: %v", time.Since(start).Round(time.Millisecond), err)
			if !errors.Is(err, ErrBackendUnavailable) {
				t.Errorf("error is not ErrBackendUnavailable: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error shows the backend's secret: %v", err)
			}
			if full := errorText(err); strings.Contains(full, secret) {
				t.Errorf("the CLI's full output (kept in OperationError.Err) shows the backend's secret:\n%s", full)
			}
			if _, err := m.Exists(ctx, stack); err == nil {
				t.Error("Exists against a backend that is down succeeded")
			}
		})
	}
}

// errorText is the text of err and of every error it wraps.
func errorText(err error) string {
	var b strings.Builder
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		b.WriteString(e.Error())
		b.WriteString("\n")
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
		}
	}
	walk(err)
	return b.String()
}

// unusedPort returns a TCP port on 127.0.0.1 that nothing listens on (just now).
func unusedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	return port
}

// postgresBackend is the PostgreSQL server of PULUMI_TEST_POSTGRES_URL. The CLI's postgres
// backend (pkg/backend/diy/postgres, driver lib/pq) keeps every object as a row of one table
// (URL parameter "table", default pulumi_state; it creates the table itself): key TEXT (the
// database name, "/", the object's key), data JSON {"data": "<base64>"}.
func postgresBackend(t *testing.T) stateBackend {
	t.Helper()
	raw := requireEnv(t, "PULUMI_TEST_POSTGRES_URL", "start PostgreSQL with `eval \"$(hack/postgres-up.sh)\"`")
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "postgres" {
		t.Fatalf("PULUMI_TEST_POSTGRES_URL is no postgres:// URL: %s", RedactURL(raw))
	}
	table := u.Query().Get("table")
	if table == "" {
		table = "pulumi_state"
	}
	if !regexp.MustCompile(`^[a-z_][a-z0-9_]*$`).MatchString(table) {
		t.Fatalf("table %q: the test handles only plain lower-case table names", table)
	}
	objects := objectPrefix(u)
	// The operator refuses a URL with a password (ErrCredentialsInURL): it goes in PGPASSWORD,
	// as the chart and README give it. The test's own psql keeps the whole URL.
	password, _ := u.User.Password()
	u.User = url.User(u.User.Username())
	return stateBackend{
		url: u.String(),
		env: map[string]string{"PGPASSWORD": password},
		keys: func(t *testing.T, prefix string) []string {
			rows := testenv.PSQL(t, raw, fmt.Sprintf("SELECT key FROM %s WHERE starts_with(key, %s) ORDER BY key", table, sqlString(objects+prefix)))
			for i := range rows {
				rows[i] = strings.TrimPrefix(rows[i], objects)
			}
			return rows
		},
		read: func(t *testing.T, key string) []byte {
			rows := testenv.PSQL(t, raw, fmt.Sprintf("SELECT data->>'data' FROM %s WHERE key = %s", table, sqlString(objects+key)))
			if len(rows) != 1 {
				t.Fatalf("table %s has %d rows for key %s, want 1", table, len(rows), key)
			}
			b, err := base64.StdEncoding.DecodeString(rows[0])
			if err != nil {
				t.Fatalf("key %s: data is not base64: %v", key, err)
			}
			return b
		},
	}
}

func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// s3Backend is the bucket of PULUMI_TEST_S3_URL (MinIO from hack/minio-up.sh), with the keys
// from PULUMI_TEST_S3_ACCESS_KEY_ID / PULUMI_TEST_S3_SECRET_ACCESS_KEY (else AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY), handed to the CLI through Config.Env. The CLI's s3 backend is
// gocloud.dev/blob/s3blob on the AWS SDK v2: each object is an S3 object of the same key.
func s3Backend(t *testing.T) stateBackend {
	t.Helper()
	raw := requireEnv(t, "PULUMI_TEST_S3_URL", "start MinIO with `eval \"$(hack/minio-up.sh)\"`")
	id, secret := os.Getenv("PULUMI_TEST_S3_ACCESS_KEY_ID"), os.Getenv("PULUMI_TEST_S3_SECRET_ACCESS_KEY")
	if id == "" && secret == "" {
		id, secret = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	}
	if id == "" || secret == "" {
		missingEnv(t, "no S3 keys in PULUMI_TEST_S3_ACCESS_KEY_ID and PULUMI_TEST_S3_SECRET_ACCESS_KEY", "`eval \"$(hack/minio-up.sh)\"` sets them")
	}
	c, err := newS3Client(raw, id, secret)
	if err != nil {
		t.Fatalf("PULUMI_TEST_S3_URL: %v", err)
	}
	return stateBackend{url: raw, env: s3Env(t, id, secret), keys: c.list, read: c.get}
}

// s3Env makes the CLI's AWS SDK use exactly these keys: nothing from the user's ~/.aws files or
// AWS_PROFILE, and never the EC2 instance metadata service (169.254.169.254: outside
// 127.0.0.0/8, where this project's tests send nothing).
func s3Env(t *testing.T, id, secret string) map[string]string {
	t.Helper()
	empty := filepath.Join(t.TempDir(), "aws-empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"AWS_ACCESS_KEY_ID":           id,
		"AWS_SECRET_ACCESS_KEY":       secret,
		"AWS_SESSION_TOKEN":           "",
		"AWS_PROFILE":                 "",
		"AWS_CONFIG_FILE":             empty,
		"AWS_SHARED_CREDENTIALS_FILE": empty,
		"AWS_EC2_METADATA_DISABLED":   "true",
	}
}

// s3Client reads a bucket with SigV4-signed GETs, path-style, without an AWS SDK (the product's
// go.mod has none).
type s3Client struct {
	endpoint *url.URL // scheme://host:port
	bucket   string
	prefix   string // objectPrefix of the URL
	region   string
	id       string
	secret   string
}

// newS3Client understands the s3:// URL forms the CLI accepts: endpoint with a scheme, or
// without one plus disable_https / disableSSL (the CLI then adds http://).
func newS3Client(raw, id, secret string) (*s3Client, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("not an s3://bucket URL: %s", RedactURL(raw))
	}
	q := u.Query()
	ep := q.Get("endpoint")
	if ep == "" {
		return nil, errors.New("no endpoint parameter: the test talks only to a local server")
	}
	if !strings.Contains(ep, "://") {
		scheme := "https"
		if q.Get("disable_https") == "true" || q.Get("disableSSL") == "true" {
			scheme = "http"
		}
		ep = scheme + "://" + ep
	}
	e, err := url.Parse(ep)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", ep, err)
	}
	if ip := net.ParseIP(e.Hostname()); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("endpoint %s is not a loopback address", ep)
	}
	region := q.Get("region")
	if region == "" {
		region = "us-east-1"
	}
	return &s3Client{endpoint: e, bucket: u.Host, prefix: objectPrefix(u), region: region, id: id, secret: secret}, nil
}

// list returns the keys in the bucket that start with prefix (ListObjectsV2, every page).
func (c *s3Client) list(t *testing.T, prefix string) []string {
	t.Helper()
	var keys []string
	token := ""
	for {
		q := url.Values{"list-type": {"2"}, "prefix": {c.prefix + prefix}}
		if token != "" {
			q.Set("continuation-token", token)
		}
		var page struct {
			Contents []struct {
				Key string `xml:"Key"`
			} `xml:"Contents"`
			IsTruncated           bool   `xml:"IsTruncated"`
			NextContinuationToken string `xml:"NextContinuationToken"`
		}
		if err := xml.Unmarshal(c.get1(t, "/"+c.bucket, q), &page); err != nil {
			t.Fatalf("list bucket %s: %v", c.bucket, err)
		}
		for _, o := range page.Contents {
			keys = append(keys, strings.TrimPrefix(o.Key, c.prefix))
		}
		if !page.IsTruncated {
			break
		}
		token = page.NextContinuationToken
	}
	sort.Strings(keys)
	return keys
}

// get returns the object key.
func (c *s3Client) get(t *testing.T, key string) []byte {
	t.Helper()
	return c.get1(t, "/"+c.bucket+"/"+c.prefix+key, nil)
}

// get1 sends one signed GET of path?query and returns the body of a 200 answer.
func (c *s3Client) get1(t *testing.T, path string, query url.Values) []byte {
	t.Helper()
	now := time.Now().UTC()
	amzDate := now.Format("20060102T150405Z")
	scope := amzDate[:8] + "/" + c.region + "/s3/aws4_request"
	payload := sha256Hex(nil)
	escPath := awsEscape(path, true)
	canonQuery := awsQuery(query)
	const signed = "host;x-amz-content-sha256;x-amz-date"
	canonical := strings.Join([]string{
		http.MethodGet, escPath, canonQuery,
		"host:" + c.endpoint.Host + "\nx-amz-content-sha256:" + payload + "\nx-amz-date:" + amzDate + "\n",
		signed, payload,
	}, "\n")
	toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + sha256Hex([]byte(canonical))
	k := hmacSHA256([]byte("AWS4"+c.secret), amzDate[:8])
	for _, part := range []string{c.region, "s3", "aws4_request"} {
		k = hmacSHA256(k, part)
	}
	sig := hex.EncodeToString(hmacSHA256(k, toSign))

	target := c.endpoint.Scheme + "://" + c.endpoint.Host + escPath
	if canonQuery != "" {
		target += "?" + canonQuery
	}
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Date", amzDate)
	req.Header.Set("X-Amz-Content-Sha256", payload)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential="+c.id+"/"+scope+", SignedHeaders="+signed+", Signature="+sig)
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// awsEscape is SigV4's URI encoding: every byte but A-Z a-z 0-9 - . _ ~ as %XX, '/' kept in
// paths.
func awsEscape(s string, path bool) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '.', c == '_', c == '~',
			path && c == '/':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// awsQuery is SigV4's canonical query string: parameters sorted by name, names and values
// escaped.
func awsQuery(q url.Values) string {
	var parts []string
	for k, vs := range q {
		for _, v := range vs {
			parts = append(parts, awsEscape(k, false)+"="+awsEscape(v, false))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "&")
}
