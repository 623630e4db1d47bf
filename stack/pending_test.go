package stack

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// TestAdoptPending: what adoptPending makes of each kind of pending operation a killed
// update leaves. The end-to-end proof (a real SIGKILL mid-create, then up and destroy) is
// test/crash/TestPendingCreateAdopted.
func TestAdoptPending(t *testing.T) {
	const (
		stackURN = "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s"
		provURN  = "urn:pulumi:s::p::pulumi:providers:kubernetes::default_4_33_0"
		provRef  = provURN + "::f525414a-e508-4c43-a167-36138e5e37e6"
		cmURN    = "urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::configmap"
		depURN   = "urn:pulumi:s::p::kubernetes:apps/v1:Deployment::deployment"
	)
	resources := `[{"urn":"` + stackURN + `","type":"pulumi:pulumi:Stack"},
		{"urn":"` + provURN + `","type":"pulumi:providers:kubernetes","id":"f525414a-e508-4c43-a167-36138e5e37e6"},
		{"urn":"` + cmURN + `","type":"kubernetes:core/v1:ConfigMap","id":"ns/a-configmap","outputs":{"big":12345678901234567890}}]`
	deployment := func(pending string) string {
		return `{"manifest":{"time":"2026-11-22T15:00:00Z"},"secrets_providers":{"type":"passphrase"},"resources":` + resources +
			`,"pending_operations":[` + pending + `]}`
	}
	op := func(typ, urn, resType, inputs string) string {
		return `{"type":"` + typ + `","resource":{"urn":"` + urn + `","type":"` + resType + `","provider":"` + provRef + `","inputs":` + inputs + `}}`
	}
	depInputs := `{"metadata":{"name":"a","namespace":"ns"},"spec":{"replicas":2}}`
	for name, tc := range map[string]struct {
		deployment string
		wantDone   []string // substrings, one per entry
		wantIDs    map[string]string
		wantUnread bool
		wantErr    string
	}{
		"none": {deployment: deployment(""), wantIDs: map[string]string{cmURN: "ns/a-configmap"}},
		"adopted, not yet read": {
			deployment: strings.Replace(deployment(""), `"outputs":{"big"`, `"outputs":{"`+adoptedMarker+`":"true","big"`, 1),
			wantUnread: true,
		},
		"create of a Deployment": {
			deployment: deployment(op("creating", depURN, "kubernetes:apps/v1:Deployment", depInputs)),
			wantDone:   []string{"adopted kubernetes:apps/v1:Deployment ns/a"},
			wantIDs:    map[string]string{cmURN: "ns/a-configmap", depURN: "ns/a"},
			wantUnread: true,
		},
		"create of a cluster-scoped object": {
			deployment: deployment(op("creating", "urn:pulumi:s::p::kubernetes:core/v1:Namespace::n", "kubernetes:core/v1:Namespace", `{"metadata":{"name":"n"}}`)),
			wantDone:   []string{"adopted kubernetes:core/v1:Namespace n"},
			wantIDs:    map[string]string{"urn:pulumi:s::p::kubernetes:core/v1:Namespace::n": "n"},
			wantUnread: true,
		},
		"create already recorded": {
			deployment: deployment(op("creating", cmURN, "kubernetes:core/v1:ConfigMap", `{"metadata":{"name":"a-configmap","namespace":"ns"}}`)),
			wantDone:   []string{"already in the state"},
			wantIDs:    map[string]string{cmURN: "ns/a-configmap"},
		},
		"create of a provider": {
			deployment: deployment(`{"type":"creating","resource":{"urn":"urn:pulumi:s::p::pulumi:providers:kubernetes::other","type":"pulumi:providers:kubernetes"}}`),
			wantDone:   []string{"cleared creating of provider"},
		},
		// A SIGKILL at the very start of a new stack's first up leaves this entry; left
		// alone, the object stays UpdateFailed for good.
		"create of the stack resource": {
			deployment: deployment(`{"type":"creating","resource":{"urn":"urn:pulumi:s::p::pulumi:pulumi:Stack::p-t","custom":false,"type":"pulumi:pulumi:Stack"}}`),
			wantDone:   []string{"cleared creating of component urn:pulumi:s::p::pulumi:pulumi:Stack::p-t"},
			wantIDs:    map[string]string{cmURN: "ns/a-configmap"},
		},
		"create of a component that does not say custom false": {
			deployment: deployment(`{"type":"creating","resource":{"urn":"urn:pulumi:s::p::my:index:Component::c","type":"my:index:Component"}}`),
			wantErr:    "cannot adopt a resource of type my:index:Component",
		},
		"update and delete": {
			deployment: deployment(op("updating", cmURN, "kubernetes:core/v1:ConfigMap", `{}`) + "," + op("deleting", cmURN, "kubernetes:core/v1:ConfigMap", `{}`)),
			wantDone:   []string{"cleared updating of " + cmURN, "cleared deleting of " + cmURN},
			wantIDs:    map[string]string{cmURN: "ns/a-configmap"},
		},
		"create of another provider's resource": {
			deployment: deployment(op("creating", "urn:pulumi:s::p::random:index/randomId:RandomId::r", "random:index/randomId:RandomId", `{}`)),
			wantErr:    "cannot adopt a resource of type random:index/randomId:RandomId",
		},
		"create without a name": {
			deployment: deployment(op("creating", depURN, "kubernetes:apps/v1:Deployment", `{"metadata":{"generateName":"a-"}}`)),
			wantErr:    "no metadata.name",
		},
		"create whose provider is not in the state": {
			deployment: strings.Replace(deployment(op("creating", depURN, "kubernetes:apps/v1:Deployment", depInputs)), provRef, provURN+"2::x", 1),
			wantErr:    "is not in the state",
		},
		"not JSON": {deployment: `{"resources":`, wantErr: "read exported state"},
	} {
		t.Run(name, func(t *testing.T) {
			got, done, unread, err := adoptPending(apitype.UntypedDeployment{Version: 3, Deployment: json.RawMessage(tc.deployment)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if unread != tc.wantUnread {
				t.Errorf("unread = %v, want %v", unread, tc.wantUnread)
			}
			if len(done) != len(tc.wantDone) {
				t.Fatalf("done = %q, want %d entries like %q", done, len(tc.wantDone), tc.wantDone)
			}
			for i, w := range tc.wantDone {
				if !strings.Contains(done[i], w) {
					t.Errorf("done[%d] = %q, want it to contain %q", i, done[i], w)
				}
			}
			if len(tc.wantDone) == 0 {
				if string(got.Deployment) != tc.deployment {
					t.Errorf("a state without pending operations was rewritten")
				}
				return
			}
			var d apitype.DeploymentV3
			if err := json.Unmarshal(got.Deployment, &d); err != nil {
				t.Fatalf("result is no deployment: %v\n%s", err, got.Deployment)
			}
			if got.Version != 3 || len(d.PendingOperations) != 0 {
				t.Errorf("version %d, pending operations %v: want 3 and none", got.Version, d.PendingOperations)
			}
			if d.SecretsProviders == nil || d.SecretsProviders.Type != "passphrase" {
				t.Errorf("secrets provider lost: %+v", d.SecretsProviders)
			}
			ids := map[string]string{}
			seen := map[string]int{}
			for _, r := range d.Resources {
				seen[string(r.URN)]++
				if r.ID != "" && !strings.HasPrefix(string(r.Type), "pulumi:") {
					ids[string(r.URN)] = string(r.ID)
				}
				if r.URN == depURN && (r.Outputs["spec"] == nil || r.Outputs[adoptedMarker] == nil || r.Inputs[adoptedMarker] != nil) {
					t.Errorf("adopted Deployment: want outputs = inputs + %s: %+v", adoptedMarker, r)
				}
			}
			for urn, n := range seen {
				if n != 1 {
					t.Errorf("%s appears %d times in the resources", urn, n)
				}
			}
			for urn, id := range tc.wantIDs {
				if ids[urn] != id {
					t.Errorf("ID of %s = %q, want %q (all: %v)", urn, ids[urn], id, ids)
				}
			}
			if !strings.Contains(string(got.Deployment), "12345678901234567890") {
				t.Error("a large number in another resource's outputs changed")
			}
		})
	}
}

// TestPendingStackResourceCleared: a stack whose state holds a pending create of its own stack
// resource (what a SIGKILL at the very start of a new stack's first up leaves) is cleared
// before the next up, through the real CLI, and the up then succeeds and leaves no pending
// operation.
func TestPendingStackResourceCleared(t *testing.T) {
	m, backend := newManager(t)
	ctx := context.Background()
	// `pulumi stack import` drops pending operations, and no real kill hits the microseconds
	// between the engine's two checkpoint writes for the stack resource on purpose, so the
	// entry is written into the file backend's checkpoint the way the killed run left it.
	var urn string
	name, st := editCheckpoint(t, m, backend, "ns", "killed", func(latest map[string]any, name string) {
		urn = "urn:pulumi:" + name + "::kindcustomhttp::pulumi:pulumi:Stack::kindcustomhttp-" + name
		latest["pending_operations"] = []any{map[string]any{"type": "creating",
			"resource": map[string]any{"urn": urn, "custom": false, "type": "pulumi:pulumi:Stack"}}}
	})

	res, err := m.Up(ctx, name, program("hi", 0), RunOptions{})
	if err != nil {
		t.Fatalf("up over a pending create of the stack resource: %v", err)
	}
	if len(res.Recovered) != 1 || !strings.Contains(res.Recovered[0], "cleared creating of component "+urn) {
		t.Fatalf("Recovered = %q, want the stack resource's entry cleared", res.Recovered)
	}
	if res.Outputs["greeting"] != "hi" {
		t.Fatalf("outputs = %v, want greeting hi", res.Outputs)
	}
	after, err := st.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d apitype.DeploymentV3
	if err := json.Unmarshal(after.Deployment, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.PendingOperations) != 0 || len(d.Resources) == 0 {
		t.Fatalf("after the up: %d pending operations, %d resources; want none and the stack resource", len(d.PendingOperations), len(d.Resources))
	}
}

// TestRestoreFieldManagers: which objects restoreFieldManagers gives back the field manager that
// applied them, and which it leaves. The end-to-end proof (a real kill mid-create, a key
// removed, the key gone after the restart) is test/crash/TestAdoptedCreateKeepsItsFieldManager.
func TestRestoreFieldManagers(t *testing.T) {
	const cmURN = "urn:pulumi:s::p::kubernetes:core/v1:ConfigMap::configmap"
	entry := func(manager, operation, subresource string) string {
		e := `{"manager":"` + manager + `","operation":"` + operation + `","fieldsV1":{"f:data":{"f:a":{}}}`
		if subresource != "" {
			e += `,"subresource":"` + subresource + `"`
		}
		return e + `}`
	}
	state := func(fm string, entries ...string) string {
		out := `"metadata":{"name":"a-configmap","managedFields":[` + strings.Join(entries, ",") + `]},"data":{"a":"1"},"big":12345678901234567890`
		if fm != "" {
			out += `,"__fieldManager":"` + fm + `"`
		}
		return `{"resources":[{"urn":"urn:pulumi:s::p::pulumi:pulumi:Stack::p-s","type":"pulumi:pulumi:Stack"},` +
			`{"urn":"` + cmURN + `","type":"kubernetes:core/v1:ConfigMap","id":"ns/a-configmap","outputs":{` + out + `}}]}`
	}
	dead, drawn := "pulumi-kubernetes-e1eea1e9", "pulumi-kubernetes-171dd6c3"
	for name, tc := range map[string]struct {
		deployment string
		want       string // the field manager after, "" for the state left as it is
		wantErr    string
	}{
		"refreshed after adoption: a drawn manager that applied nothing": {
			deployment: state(drawn, entry(dead, "Apply", "")), want: dead},
		"no field manager in the outputs": {deployment: state("", entry(dead, "Apply", "")), want: dead},
		"the state's manager applied it": {
			deployment: state(dead, entry(dead, "Apply", ""), entry("kube-controller-manager", "Update", ""))},
		"two pulumi managers (which one is lost cannot be told)": {
			deployment: state("pulumi-kubernetes-00000000", entry(dead, "Apply", ""), entry(drawn, "Apply", ""))},
		"only other managers": {
			deployment: state(drawn, entry("kubectl-client-side-apply", "Update", ""), entry("pulumi-kubernetes-x", "Update", ""),
				entry("pulumi-kubernetes-y", "Apply", "status"))},
		"no managedFields yet (adopted, not read)": {
			deployment: strings.Replace(state(""), `"outputs":{`, `"outputs":{"`+adoptedMarker+`":"true",`, 1)},
		"not JSON": {deployment: `{"resources":`, wantErr: "read exported state"},
	} {
		t.Run(name, func(t *testing.T) {
			got, lines, err := restoreFieldManagers(apitype.UntypedDeployment{Version: 3, Deployment: json.RawMessage(tc.deployment)})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(lines) != 0 || string(got.Deployment) != tc.deployment {
					t.Errorf("the state was rewritten (%q):\n%s", lines, got.Deployment)
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], "restored field manager "+tc.want+" of kubernetes:core/v1:ConfigMap ns/a-configmap") {
				t.Errorf("lines = %q, want one naming %s and the ConfigMap", lines, tc.want)
			}
			var d apitype.DeploymentV3
			if err := json.Unmarshal(got.Deployment, &d); err != nil {
				t.Fatalf("result is no deployment: %v", err)
			}
			if fm := d.Resources[1].Outputs[fieldManagerKey]; fm != tc.want {
				t.Errorf("outputs.%s = %v, want %s", fieldManagerKey, fm, tc.want)
			}
			if !strings.Contains(string(got.Deployment), "12345678901234567890") {
				t.Error("a large number in the outputs changed")
			}
		})
	}
}

// TestFieldManagerRestoredAfterAKilledImport: a run killed after the adoption's refresh and
// before the import that restores the field manager leaves a Kubernetes object whose outputs
// name a field manager that never applied it, and no pending operation. The next look
// (settlePending, through the real CLI's export and import) restores it, once: a second look
// finds nothing to do.
func TestFieldManagerRestoredAfterAKilledImport(t *testing.T) {
	m, backend := newManager(t)
	ctx := context.Background()
	const dead, drawn = "pulumi-kubernetes-e1eea1e9", "pulumi-kubernetes-171dd6c3"
	var cmURN string
	name, st := editCheckpoint(t, m, backend, "ns", "refreshed", func(latest map[string]any, name string) {
		provURN := "urn:pulumi:" + name + "::kindcustomhttp::pulumi:providers:kubernetes::default"
		cmURN = "urn:pulumi:" + name + "::kindcustomhttp::kubernetes:core/v1:ConfigMap::configmap"
		resources, _ := latest["resources"].([]any)
		latest["resources"] = append(resources,
			map[string]any{"urn": provURN, "custom": true, "type": "pulumi:providers:kubernetes", "id": "f525414a-e508-4c43-a167-36138e5e37e6"},
			map[string]any{"urn": cmURN, "custom": true, "type": "kubernetes:core/v1:ConfigMap", "id": "ns/a-configmap",
				"provider": provURN + "::f525414a-e508-4c43-a167-36138e5e37e6",
				"inputs":   map[string]any{"metadata": map[string]any{"name": "a-configmap", "namespace": "ns"}, "data": map[string]any{"a": "1"}},
				"outputs": map[string]any{fieldManagerKey: drawn, "data": map[string]any{"a": "1"},
					"metadata": map[string]any{"name": "a-configmap", "namespace": "ns", "managedFields": []any{
						map[string]any{"manager": dead, "operation": "Apply", "fieldsV1": map[string]any{"f:data": map[string]any{"f:a": map[string]any{}}}}}}}})
	})

	lines, err := m.settlePending(ctx, st, name)
	if err != nil {
		t.Fatalf("settlePending: %v", err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "restored field manager "+dead) {
		t.Fatalf("lines = %q, want the ConfigMap's field manager restored", lines)
	}
	after, err := st.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d apitype.DeploymentV3
	if err := json.Unmarshal(after.Deployment, &d); err != nil {
		t.Fatal(err)
	}
	var got any
	for _, r := range d.Resources {
		if string(r.URN) == cmURN {
			got = r.Outputs[fieldManagerKey]
		}
	}
	if got != dead {
		t.Fatalf("after the import the ConfigMap's outputs.%s = %v, want %s", fieldManagerKey, got, dead)
	}
	m.recordPending(name)
	if lines, err := m.settlePending(ctx, st, name); err != nil || len(lines) != 0 {
		t.Fatalf("a second look: lines %q, err %v; want nothing done", lines, err)
	}
}

// editCheckpoint creates stack ns/name of m (a file backend at backend) and rewrites its
// checkpoint's latest deployment with edit, the way a killed run leaves a state that no CLI
// command writes on purpose; it returns the stack's name and the stack.
func editCheckpoint(t *testing.T, m *Manager, backend, ns, name string, edit func(latest map[string]any, stackName string)) (string, auto.Stack) {
	t.Helper()
	stackName, err := m.StackName(ns, name)
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.open(context.Background(), stackName, true)
	if err != nil {
		t.Fatalf("create stack: %v", err)
	}
	file := filepath.Join(backend, ".pulumi", "stacks", "kindcustomhttp", stackName+".json")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cp map[string]any
	if err := json.Unmarshal(raw, &cp); err != nil {
		t.Fatal(err)
	}
	latest, _ := cp["checkpoint"].(map[string]any)["latest"].(map[string]any)
	if latest == nil {
		t.Fatalf("no checkpoint.latest in %s: %s", file, raw)
	}
	edit(latest, stackName)
	if raw, err = json.Marshal(cp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	m.recordPending(stackName) // as after a restart: the Manager has not looked yet
	return stackName, st
}
