package enginehost

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	neturl "net/url"
	"os"
	"strings"
	"testing"

	_ "github.com/lib/pq" // database/sql driver "postgres", as pkg/v3's PostgreSQL backend uses
	"github.com/pulumi/pulumi/pkg/v3/backend"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// BenchmarkStackLookup times one lookup of a stack (backend.GetStack, as every up and init does
// first) in a backend whose project holds n stacks, through the engine host's own backend
// (pkg/v3's DIY backend): a file:// directory, and the PostgreSQL server of
// PULUMI_TEST_POSTGRES_URL (`eval "$(hack/postgres-up.sh)"`; the sub-benchmark says SKIP
// without it) in a table of its own, dropped at the end. The stacks are copies of one that the
// host's init made, written through the backend's own bucket, so each has what the operator's
// have: a checkpoint and its .bak (and, on the file backend, gocloud's .attrs beside each).
//
// pkg/v3 finds a stack's checkpoint by listing the keys that start with its name (backend/diy
// state.go, stackPath), on every lookup and every checkpoint save. The file backend answers that
// by reading the project's whole directory; PostgreSQL from an index on the key. So the time
// per lookup grows with the stacks of the project on the file backend only; docs/benchmarks.md
// ("Scale") says what that costs an up.
func BenchmarkStackLookup(b *testing.B) {
	b.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	pg := os.Getenv("PULUMI_TEST_POSTGRES_URL")
	for _, kind := range []string{"file", "postgres"} {
		for _, n := range []int{100, 1000, 10000} {
			b.Run(fmt.Sprintf("%s/stacks=%d", kind, n), func(b *testing.B) {
				var url string
				switch kind {
				case "file":
					url = "file://" + b.TempDir()
				case "postgres":
					if pg == "" {
						b.Skip("SKIP: PostgreSQL: PULUMI_TEST_POSTGRES_URL is not set; start one with `eval \"$(hack/postgres-up.sh)\"`")
					}
					url = postgresTable(b, pg, fmt.Sprintf("bench_lookup_%d_%d", n, os.Getpid()))
				}
				be := backendWithStacks(b, url, n)
				ref, err := be.ParseStackReference("dev")
				if err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					st, err := be.GetStack(context.Background(), ref)
					if err != nil || st == nil {
						b.Fatalf("GetStack(dev) = %v, %v; want the stack", st, err)
					}
				}
			})
		}
	}
}

// backendWithStacks opens the engine host's backend at url with n stacks of project proj: dev,
// made by the host's init, and n-1 copies of it, s-00000 and on.
func backendWithStacks(b *testing.B, url string, n int) backend.Backend {
	b.Helper()
	ctx := context.Background()
	h := &host{project: "proj", url: url, stderr: io.Discard}
	if r := h.run(ctx, protocol.Request{Op: protocol.OpInit, Stack: "dev"}, scope{}); r.Code != 0 {
		b.Fatalf("init dev: %+v", r)
	}
	bucket, err := blob.OpenBucket(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer bucket.Close()
	// As pkg/v3's diy.New: a URL other than file:// keeps the backend under its path.
	if u, err := neturl.Parse(url); err == nil && u.Scheme != "file" {
		if sub := strings.Trim(u.Path, "/"); sub != "" {
			bucket = blob.PrefixedBucket(bucket, sub+"/")
		}
	}
	const dir = ".pulumi/stacks/proj/"
	checkpoint, err := bucket.ReadAll(ctx, dir+"dev.json")
	if err != nil {
		b.Fatal(err)
	}
	for i := range n - 1 {
		key := fmt.Sprintf("%ss-%05d.json", dir, i)
		for _, k := range []string{key, key + ".bak"} {
			if err := bucket.WriteAll(ctx, k, checkpoint, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	be, err := h.backend(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return be
}

// postgresTable is raw (a postgres:// URL) with its table parameter set to table, which is
// dropped when b ends.
func postgresTable(b *testing.B, raw, table string) string {
	b.Helper()
	u, err := neturl.Parse(raw)
	if err != nil {
		b.Fatalf("PULUMI_TEST_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	b.Cleanup(func() {
		db, err := sql.Open("postgres", raw)
		if err != nil {
			b.Errorf("drop table %s: %v", table, err)
			return
		}
		defer db.Close()
		if _, err := db.Exec("DROP TABLE IF EXISTS " + table); err != nil {
			b.Errorf("drop table %s: %v", table, err)
		}
	})
	return u.String()
}
