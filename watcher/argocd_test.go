package watcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// argoHealthKey is the argocd-cm key of the health check (Argo CD's
// resource.customizations.health.<group>_<kind>).
const argoHealthKey = "resource.customizations.health.groupsp.measutosh.dev_KindCustomHttp"

// argoHealthScript is the Lua health check as docs/argocd.md gives it: the data of its YAML
// block, under argoHealthKey. The chart README's Argo CD section must give the same block.
func argoHealthScript(t *testing.T) string {
	t.Helper()
	yamlBlock := func(file string) string {
		t.Helper()
		doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), file))
		if err != nil {
			t.Fatal(err)
		}
		_, rest, ok := strings.Cut(string(doc), "## Argo CD")
		if file == "docs/argocd.md" {
			rest, ok = string(doc), true
		}
		_, rest, ok2 := strings.Cut(rest, "```yaml\n")
		block, _, ok3 := strings.Cut(rest, "```")
		if !ok || !ok2 || !ok3 {
			t.Fatalf("%s has no Argo CD ```yaml block", file)
		}
		return block
	}
	block := yamlBlock("docs/argocd.md")
	if chart := yamlBlock("charts/pulumi-operator/README.md"); chart != block {
		t.Fatalf("the chart README's Argo CD health check differs from docs/argocd.md's:\n%s", chart)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal([]byte(block), &cm); err != nil {
		t.Fatalf("docs/argocd.md's block: %v", err)
	}
	script := cm.Data[argoHealthKey]
	if script == "" {
		t.Fatalf("docs/argocd.md's block has no %s", argoHealthKey)
	}
	return script
}

// argoHealth runs script as Argo CD runs a health check (argo-cd util/lua: the object as the
// global obj, decoded into Lua values as its decodeValue does; the returned table's status and
// message) with gopher-lua, the engine Argo CD embeds.
func argoHealth(t *testing.T, script string, u *unstructured.Unstructured) (status, message string) {
	t.Helper()
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		l.Push(l.NewFunction(lib.fn))
		l.Push(lua.LString(lib.name))
		l.Call(1, 0)
	}
	l.SetGlobal("obj", toLua(l, u.Object))
	if err := l.DoString(script); err != nil {
		t.Fatalf("health check: %v", err)
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		t.Fatalf("health check returned %v, want a table", l.Get(-1))
	}
	return lua.LVAsString(ret.RawGetString("status")), lua.LVAsString(ret.RawGetString("message"))
}

// toLua is argo-cd util/lua decodeValue: maps become tables by key, slices tables by index,
// numbers, strings and booleans themselves, anything else nil.
func toLua(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := l.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(l, e))
		}
		return t
	case []any:
		t := l.NewTable()
		for _, e := range v {
			t.Append(toLua(l, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	}
	return lua.LNil
}

// TestArgoHealthFailedUp: an object whose up keeps failing is Progressing to Argo CD (the
// operator retries it, Reconciling True) with the failure as the message, not Healthy.
func TestArgoHealthFailedUp(t *testing.T) {
	script := argoHealthScript(t)
	f := start(t)
	f.stacks.failures.Store(1000)
	f.create(t, "failing", "  replicaCount: 1\n  port: 80\n")
	f.waitFor(t, "failing", "an up failure in status", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonUpdateFailed
	})
	u, err := f.cr.Get(context.Background(), "failing", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if status, msg := argoHealth(t, script, u); status != "Progressing" || !strings.Contains(msg, "injected failure") {
		t.Errorf("Argo CD health of a failing object: %s %q, want Progressing naming the failure", status, msg)
	}
	f.stacks.failures.Store(0)
}
