package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// Pending operations are what a pulumi process killed in the middle of an update (SIGKILL,
// the OOM killer, a node lost) leaves in the stack's state: "creating", "updating", "deleting"
// entries for the resources it was changing. Pulumi clears the update and delete ones at the
// next update, but keeps pending creates forever and asks for `pulumi refresh` to be run
// interactively (pkg/backend/snapshot.go: "these must require user intervention"). Left
// alone they wedge a stack: the object the killed run created exists in the cluster but not
// in the state, so every later up fails with "already exists" (pulumi-kubernetes ≥ 4.29
// upserts on create only when PULUMI_K8S_UPSERT_EXISTING_OBJECTS is set, which the Manager
// sets: see New), and a destroy deletes everything but that object.
//
// The CLI's non-interactive way out, `refresh --import-pending-creates URN ID`, does not work
// in v3.255.0: the refresh turns the entry into an "importing" one and then drops it, leaving
// the object orphaned. `pulumi import` needs the program's language plugin, which an inline
// Automation API program does not have. So the operator adopts a pending create itself, the way
// the interactive prompt's "import" answer would: it moves the entry into the state's resources
// with the ID the provider gives that object (namespace/name, from the entry's own inputs),
// imports the state with `pulumi stack import` (which takes the stack's lock and drops the
// other pending entries), and runs `pulumi refresh`, which reads every resource from the
// cluster: an adopted object that was never created is removed from the state again, one that
// was is kept, with its live state.
//
// Until that refresh has run, an adopted resource's outputs are only its inputs, and an up
// would take it for something to replace (pulumi-kubernetes finds no old inputs in them), as
// after a kill between the import and the refresh. So adopted outputs carry adoptedMarker,
// which only a provider's read removes, and a state that still has it is refreshed before
// anything else runs on it.

// adoptedMarker is the key, in an adopted resource's outputs, that says the resource has
// not been read from the cluster since its adoption.
const adoptedMarker = "__pulumiOperatorAdoptedUnread"

// recordPending notes that stackName may hold pending operations: an operation on it failed
// or was cancelled, or this process has not looked yet.
func (m *Manager) recordPending(stackName string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.settled, stackName)
}

// recordSettled notes that stackName holds no pending operation of a dead update: this
// process created it, or looked, or its last operation succeeded.
func (m *Manager) recordSettled(stackName string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled[stackName] = true
}

func (m *Manager) isSettled(stackName string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.settled[stackName]
}

// settlePending resolves the pending operations a killed update left in the stack before
// an operation runs on it; see the comment at the top of this file. It looks (one `stack
// export`, a CLI run) only the first time this process touches the stack and after a failed
// operation. It returns what it did, one line per entry, for the operator's log and Events;
// nil when there was nothing to do.
//
// Errors: ErrLocked (wrapped in an *OperationError) when another update holds the lock or
// changed the state while it looked: the entries may be that update's own, and only a
// later look can tell; an error naming the entry for a pending create it cannot adopt.
//
// What it cannot rule out: another process starting and finishing a whole update in the
// moment between its second export and the import taking the lock; its result would then be
// overwritten by the state read before it. Only a pending operation, that is a crash, opens
// this window.
func (m *Manager) settlePending(ctx context.Context, st auto.Stack, stackName string) ([]string, error) {
	if m.isSettled(stackName) {
		return nil, nil
	}
	first, err := st.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("export stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	fixed, done, unread, err := adoptPending(first)
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", stackName, err)
	}
	if len(done) == 0 && !unread {
		// A run killed after the refresh below and before its import left objects without
		// their field manager; their managedFields, read by that refresh, still say it.
		lines, err := m.restoreFieldManagersOf(ctx, st, stackName, first)
		if err != nil {
			return nil, err
		}
		m.recordSettled(stackName)
		return lines, nil
	}
	if len(done) == 0 {
		// No entries: resources adopted by an earlier run that died before its refresh.
		done = []string{"refreshed resources adopted by an interrupted run"}
	} else {
		// The entries are a dead update's only if nobody is writing the state: read it
		// again, and let the import's own lock catch an update that starts after that.
		if err := m.importIfQuiet(ctx, st, stackName, first, fixed); err != nil {
			return nil, err
		}
	}
	if _, err := st.Refresh(ctx, optrefresh.SuppressProgress(), optrefresh.Color("never")); err != nil {
		return done, fmt.Errorf("refresh stack %s after adopting its pending operations: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	// The refresh has read the adopted objects, their managedFields included: give each the
	// field manager that applied it (see restoreFieldManagers).
	read, err := st.Export(ctx)
	if err != nil {
		return done, fmt.Errorf("export stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	lines, err := m.restoreFieldManagersOf(ctx, st, stackName, read)
	if err != nil {
		return done, err
	}
	m.recordSettled(stackName)
	return append(done, lines...), nil
}

// restoreFieldManagersOf runs restoreFieldManagers on dep, stackName's state as just exported,
// and imports the result (importIfQuiet) when it restored anything; it returns
// restoreFieldManagers's lines. Errors: an unreadable state, importIfQuiet's.
func (m *Manager) restoreFieldManagersOf(ctx context.Context, st auto.Stack, stackName string, dep apitype.UntypedDeployment) ([]string, error) {
	restored, lines, err := restoreFieldManagers(dep)
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", stackName, err)
	}
	if len(lines) > 0 {
		if err := m.importIfQuiet(ctx, st, stackName, dep, restored); err != nil {
			return nil, err
		}
	}
	return lines, nil
}

// importIfQuiet imports fixed, made from the export before, into stackName's state if the state
// is still before: read once more, and let the import's own lock catch an update that starts
// after that. Errors: ErrLocked (in an *OperationError) when the state changed, that is another
// update is running; the import's error.
func (m *Manager) importIfQuiet(ctx context.Context, st auto.Stack, stackName string, before, fixed apitype.UntypedDeployment) error {
	again, err := st.Export(ctx)
	if err != nil {
		return fmt.Errorf("export stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	if !bytes.Equal(before.Deployment, again.Deployment) {
		return &OperationError{Summary: "stack " + stackName + "'s state changed while the operator was repairing it after an interrupted update: another update is running", Err: ErrLocked, kind: ErrLocked}
	}
	if err := st.Import(ctx, fixed); err != nil {
		return fmt.Errorf("import repaired state of stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	return nil
}

// fieldManagerKey is where pulumi-kubernetes keeps, among a resource's outputs, the field
// manager of its server-side applies ("pulumi-kubernetes-" and 8 hex digits, drawn at random by
// the Check before the object's create; provider.go fieldManagerName takes the
// pulumi.com/patchFieldManager annotation first, then this, then a new random name). Only the
// create writes it into the outputs.
const fieldManagerKey = "__fieldManager"

// restoreFieldManagers returns dep with fieldManagerKey, in the outputs of every Kubernetes
// object whose field manager there never applied it, set to the one pulumi-kubernetes field
// manager that did as its outputs' metadata.managedFields say (an "Apply" entry, not of a
// subresource, named "pulumi-kubernetes-..."), and one line per object it set. An object with
// none or several such managers is left as it is.
//
// Why: an adopted pending create (adoptPending) has no outputs of its create, so no field
// manager; the refresh after the adoption draws a new one (fieldManagerName's last resort), and
// a server-side apply drops only the fields its own manager applied before. A field removed
// from the spec since (a configMapData key, a port, an envFrom entry) would then stay in the
// cluster for good, owned by the dead run's manager, and the drift repair, applying as the new
// manager, could not remove it either (test/crash/TestAdoptedCreateKeepsItsFieldManager).
func restoreFieldManagers(dep apitype.UntypedDeployment) (apitype.UntypedDeployment, []string, error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(dep.Deployment))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return dep, nil, fmt.Errorf("read exported state: %w", err)
	}
	resources, _ := doc["resources"].([]any)
	var lines []string
	for _, r := range resources {
		rm, _ := r.(map[string]any)
		typ, _ := rm["type"].(string)
		out, _ := rm["outputs"].(map[string]any)
		if !strings.HasPrefix(typ, "kubernetes:") || out == nil || out[adoptedMarker] != nil {
			continue
		}
		meta, _ := out["metadata"].(map[string]any)
		entries, _ := meta["managedFields"].([]any)
		managers := map[string]bool{}
		for _, e := range entries {
			em, _ := e.(map[string]any)
			name, _ := em["manager"].(string)
			sub, _ := em["subresource"].(string)
			if em["operation"] == "Apply" && sub == "" && strings.HasPrefix(name, "pulumi-kubernetes-") {
				managers[name] = true
			}
		}
		if cur, _ := out[fieldManagerKey].(string); managers[cur] || len(managers) != 1 {
			continue // the state's manager applied the object, or it cannot say which did
		}
		for name := range managers {
			out[fieldManagerKey] = name
			id, _ := rm["id"].(string)
			lines = append(lines, fmt.Sprintf("restored field manager %s of %s %s (adopted after an interrupted create)", name, typ, id))
		}
	}
	if len(lines) == 0 {
		return dep, nil, nil
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return dep, nil, fmt.Errorf("write state: %w", err)
	}
	return apitype.UntypedDeployment{Version: dep.Version, Deployment: raw}, lines, nil
}

// adoptPending returns dep without pending operations, each pending create of a Kubernetes
// object moved into the resources with its ID (outputs: its inputs and adoptedMarker), and
// one line per entry saying what became of it; unread says whether the result holds a
// resource adopted and not yet read (marked), which a refresh must read before an up. dep
// is a stack export (version 3); everything else in it is kept as it is (decoded with
// json.Number, so no number changes). A pending create of a provider or of a component
// (custom: false, such as the stack resource) is cleared: both exist only in the state. A
// pending create of another type than these and a Kubernetes object is an error: the
// operator's program declares no such resource, and adopting it would need that provider's
// ID rules.
func adoptPending(dep apitype.UntypedDeployment) (_ apitype.UntypedDeployment, _ []string, unread bool, _ error) {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(dep.Deployment))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return dep, nil, false, fmt.Errorf("read exported state: %w", err)
	}
	resources, _ := doc["resources"].([]any)
	known := map[string]bool{}
	for _, r := range resources {
		if rm, ok := r.(map[string]any); ok {
			if urn, ok := rm["urn"].(string); ok {
				known[urn] = true
			}
			if out, ok := rm["outputs"].(map[string]any); ok && out[adoptedMarker] != nil {
				unread = true
			}
		}
	}
	ops, _ := doc["pending_operations"].([]any)
	if len(ops) == 0 {
		return dep, nil, unread, nil
	}
	var done []string
	for _, o := range ops {
		om, _ := o.(map[string]any)
		res, _ := om["resource"].(map[string]any)
		opType, _ := om["type"].(string)
		urn, _ := res["urn"].(string)
		typ, _ := res["type"].(string)
		switch {
		case opType != string(apitype.OperationTypeCreating):
			// The resource is still in the state; the refresh reads what became of it.
			done = append(done, fmt.Sprintf("cleared %s of %s (the refresh reads its live state)", opType, urn))
		case known[urn]:
			// A later update created it and recorded it; the entry is a leftover.
			done = append(done, fmt.Sprintf("cleared creating of %s (already in the state)", urn))
		case strings.HasPrefix(typ, "pulumi:providers:"):
			// A provider exists only in the state: nothing outside to adopt.
			done = append(done, fmt.Sprintf("cleared creating of provider %s", urn))
		case strings.HasPrefix(typ, "kubernetes:"):
			id, err := kubernetesID(res)
			if err != nil {
				return dep, nil, false, fmt.Errorf("pending create of %s: %w", urn, err)
			}
			if p, _ := res["provider"].(string); p != "" {
				if purn, _, _ := strings.Cut(p, "::"+lastSegment(p)); !known[purn] {
					return dep, nil, false, fmt.Errorf("pending create of %s: its provider %s is not in the state; export the stack, remove the entry and check the cluster for the object", urn, p)
				}
			}
			adopted := make(map[string]any, len(res)+2)
			for k, v := range res {
				adopted[k] = v
			}
			adopted["id"] = id
			inputs, _ := res["inputs"].(map[string]any)
			outputs := make(map[string]any, len(inputs)+1)
			for k, v := range inputs {
				outputs[k] = v
			}
			outputs[adoptedMarker] = "true"
			adopted["outputs"] = outputs
			unread = true
			resources = append(resources, adopted)
			known[urn] = true
			done = append(done, fmt.Sprintf("adopted %s %s (interrupted while creating; kept if it exists)", typ, id))
		case res["custom"] == false:
			// A component (the stack resource pulumi:pulumi:Stack, the first thing an up of a
			// new stack creates) has no provider and nothing outside the state; the next up
			// creates it again. Only an entry that says custom: false counts (apitype's
			// ResourceV3 always writes the field): one without it is left to the default.
			done = append(done, fmt.Sprintf("cleared creating of component %s (it exists only in the state)", urn))
		default:
			return dep, nil, false, fmt.Errorf("pending create of %s: cannot adopt a resource of type %s; export the stack, remove the entry from pending_operations and import it (`pulumi stack export|import`)", urn, typ)
		}
	}
	doc["resources"] = resources
	delete(doc, "pending_operations")
	raw, err := json.Marshal(doc)
	if err != nil {
		return dep, nil, false, fmt.Errorf("write state: %w", err)
	}
	return apitype.UntypedDeployment{Version: dep.Version, Deployment: raw}, done, unread, nil
}

// lastSegment is what follows the last "::" of a provider reference "<urn>::<id>".
func lastSegment(ref string) string {
	if i := strings.LastIndex(ref, "::"); i >= 0 {
		return ref[i+2:]
	}
	return ""
}

// kubernetesID is the ID pulumi-kubernetes gives an object: "namespace/name", or "name" for
// a cluster-scoped one, from the resource's inputs.
func kubernetesID(res map[string]any) (string, error) {
	inputs, _ := res["inputs"].(map[string]any)
	meta, _ := inputs["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	if name == "" {
		return "", fmt.Errorf("no metadata.name in its inputs")
	}
	if ns, _ := meta["namespace"].(string); ns != "" {
		return ns + "/" + name, nil
	}
	return name, nil
}
