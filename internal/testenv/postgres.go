package testenv

import (
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PSQL runs query in the database of the postgres:// URL raw (a Pulumi backend URL: its
// `table` parameter is dropped, libpq does not know it) and returns the rows, one string per
// row with columns joined by "|". The password goes through PGPASSWORD, not the command line.
// A failed query fails the test.
func PSQL(t testing.TB, raw, query string) []string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("postgres URL: %v", err)
	}
	q := u.Query()
	q.Del("table")
	u.RawQuery = q.Encode()
	password, _ := u.User.Password()
	u.User = url.User(u.User.Username())
	cmd := exec.Command(psqlPath(t), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", u.String(), "-c", query)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+password, "PGCONNECT_TIMEOUT=10")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("psql %q: %v: %s", query, err, stderr.String())
	}
	var rows []string
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if l != "" {
			rows = append(rows, l)
		}
	}
	return rows
}

// psqlPath finds psql: $PG_BIN/psql (as hack/postgres-up.sh uses it), Debian's PostgreSQL 15,
// or PATH.
func psqlPath(t testing.TB) string {
	t.Helper()
	candidates := []string{"/usr/lib/postgresql/15/bin/psql"}
	if dir := os.Getenv("PG_BIN"); dir != "" {
		candidates = append([]string{filepath.Join(dir, "psql")}, candidates...)
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("no psql to read the backend's table with: install postgresql-client-15 or set PG_BIN")
	}
	return p
}
