package crash

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestShards runs two operators on one PostgreSQL backend and one namespace, one with
// --label-selector shard=a, the other with shard=b (no leader election): each object is
// reconciled by exactly one of them. An object relabelled from shard a to b moves to the other
// operator, which takes over its stack; an object of neither shard is left alone. Proof from
// the logs: an object's "running up"/"running destroy" lines appear only in its shard's log,
// and the other operator's log never names it. The stacks must be rows of the PostgreSQL
// table: the backend the README gives shards, never a file backend instead.
//
// It needs PULUMI_TEST_POSTGRES_URL (SKIP without it, FAIL under CI=true; make test sets it).
func TestShards(t *testing.T) {
	requirePlugin(t)
	backendURL := requireEnv(t, "PULUMI_TEST_POSTGRES_URL", "start PostgreSQL with `eval \"$(hack/postgres-up.sh)\"`")
	if !strings.HasPrefix(backendURL, "postgres://") {
		t.Fatalf("PULUMI_TEST_POSTGRES_URL is %s, want a postgres:// URL", stack.RedactURL(backendURL))
	}
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const passphrase, cluster = "shards-passphrase", "shards"
	start := func(shard string) *operator {
		op := newOperator(t, operatorConfig{name: "shard-" + shard, kubeconfig: c.Kubeconfig, backendURL: backendURL,
			stateDir: t.TempDir(), cluster: cluster, namespace: ns, extra: []string{"--label-selector", "shard=" + shard},
			env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": passphrase}})
		op.start()
		return op
	}
	opA, opB := start("a"), start("b")
	t.Cleanup(func() { deleteAllAndWait(t, c, ns, 3*time.Minute) })

	shardOf := map[string]string{"a1": "a", "a2": "a", "b1": "b", "b2": "b"}
	live := map[string]spec{}
	for name, shard := range shardOf {
		live[name] = spec{replicas: 1, data: map[string]string{"hostports": name + ",8080\n"}}
		if err := createCR(ctx, c, ns, name, live[name], map[string]string{"shard": shard}); err != nil {
			t.Fatal(err)
		}
	}
	// Of neither shard: nobody may touch it.
	if err := createCR(ctx, c, ns, "none", spec{replicas: 1}, map[string]string{"shard": "c"}); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, ns, live, nil, 3*time.Minute)
	for name := range live {
		live[name] = spec{replicas: 2, data: map[string]string{"hostports": name + ",8081\n"}}
		if err := patchCR(ctx, c, ns, name, live[name]); err != nil {
			t.Fatal(err)
		}
	}
	waitConverged(t, c, ns, live, nil, 3*time.Minute)

	// a2 moves to shard b, then changes: only b may run its up.
	markA, markB := opA.logs.Len(), opB.logs.Len()
	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	if _, err := cr.Patch(ctx, "a2", types.MergePatchType, []byte(`{"metadata":{"labels":{"shard":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	live["a2"] = spec{replicas: 3, data: map[string]string{"hostports": "a2,8082\n"}}
	if err := patchCR(ctx, c, ns, "a2", live["a2"]); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, ns, live, nil, 3*time.Minute)
	movedA, movedB := opA.logs.since(markA), opB.logs.since(markB)

	for _, name := range []string{"a1", "b1"} {
		if err := cr.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(live, name)
	}
	waitConverged(t, c, ns, live, []string{"a1", "b1"}, 3*time.Minute)

	logs := map[string]string{"a": opA.logs.String(), "b": opB.logs.String()}
	other := map[string]string{"a": "b", "b": "a"}
	for name, shard := range map[string]string{"a1": "a", "b1": "b", "b2": "b"} {
		if n := objectLines(logs[shard], ns, name, "running up"); n == 0 {
			t.Errorf("shard %s's log has no \"running up\" of %s", shard, name)
		}
		if n := namingLines(logs[other[shard]], ns, name); n != 0 {
			t.Errorf("shard %s's log names %s (of shard %s) %d times", other[shard], name, shard, n)
		}
	}
	for name, shard := range map[string]string{"a1": "a", "b1": "b"} {
		if objectLines(logs[shard], ns, name, "running destroy") == 0 {
			t.Errorf("shard %s's log has no \"running destroy\" of %s", shard, name)
		}
	}
	if objectLines(logs["a"], ns, "a2", "running up") == 0 {
		t.Errorf("shard a's log has no \"running up\" of a2 before it moved")
	}
	if n := namingLines(movedA, ns, "a2"); n != 0 {
		t.Errorf("shard a's log names a2 %d times after it moved to shard b", n)
	}
	if objectLines(movedB, ns, "a2", "running up") == 0 {
		t.Errorf("shard b's log has no \"running up\" of a2 after it moved to shard b")
	}
	for shard, log := range logs {
		if n := namingLines(log, ns, "none"); n != 0 {
			t.Errorf("shard %s's log names object none (shard c) %d times", shard, n)
		}
	}
	none, err := cr.Get(ctx, "none", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(none.GetFinalizers()) != 0 || none.Object["status"] != nil {
		t.Errorf("object none (shard c) was touched: finalizers %v, status %v", none.GetFinalizers(), none.Object["status"])
	}

	b := openBackend(t, backendURL, cluster, passphrase)
	rep := checkState(t, c, b, ns, live)
	// The stacks the shards made are rows of the PostgreSQL table (the DIY backend's stack
	// files, .pulumi/stacks/<project>/<stack>.json), one per live object.
	rows := testenv.PSQL(t, backendURL, fmt.Sprintf("SELECT key FROM %s WHERE key LIKE '%%.pulumi/stacks/kindcustomhttp/%s.%s.%%.json'",
		pgTable(t, backendURL), cluster, ns))
	if len(rows) != len(live) {
		t.Errorf("the PostgreSQL table holds %d stack files of namespace %s, want %d (one per live object): %v", len(rows), ns, len(live), rows)
	}
	t.Logf("runs: shard a %d up, %d destroy; shard b %d up, %d destroy; stacks checked %d (resources %d, cluster objects %d)",
		countLines(logs["a"], "running up"), countLines(logs["a"], "running destroy"),
		countLines(logs["b"], "running up"), countLines(logs["b"], "running destroy"), rep.stacks, rep.resources, rep.liveObjects)
	t.Logf("backend: %s, table %s: %d stack rows", stack.RedactURL(backendURL), pgTable(t, backendURL), len(rows))
}

// objectLines counts the log lines about object ns/name (its object= attribute) that contain
// msg.
func objectLines(log, ns, name, msg string) int {
	re := regexp.MustCompile(`object="?` + regexp.QuoteMeta(ns+"/"+name) + `("|\s|$)`)
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if re.MatchString(l) && strings.Contains(l, msg) {
			n++
		}
	}
	return n
}

// namingLines counts the log lines that name object ns/name at all: as namespace/name or in
// its stack name <cluster>.<namespace>.<name>.
func namingLines(log, ns, name string) int {
	re := regexp.MustCompile(`(^|[\s="./])` + regexp.QuoteMeta(ns) + `[./]` + regexp.QuoteMeta(name) + `("|\s|$)`)
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}
