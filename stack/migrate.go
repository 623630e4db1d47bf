package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/pulumi-operator/pulumi-operator/infra"
)

// Stacks named by the rule before Name's: a shortened name joined its prefix and hash with '-'
// (LegacyName), so that it could also be the whole name of another object in the same
// namespace (the one named after the shortened name's tail), and both objects shared one
// stack. Name joins them with '_' instead, and a stack of the old rule is moved to its new name
// by the first operation that meets it (settleName), whichever of the two objects that
// operation is for. Which object a stack belongs to is read from its state, never from its
// name: the KindCustomHttp its Kubernetes objects carry (their namespace and
// infra.LabelInstance label) and its outputs name (infra.OutputNamespace,
// infra.OutputDeploymentName), which only that object's program writes. A stack that holds
// nothing names no object: it is left where it is when its name is also a whole name (the
// other object may be using it), and moved otherwise (nobody else can have it).

// ErrStackOfAnother means the stack that Name gives an object holds the objects of another
// KindCustomHttp, which cannot be moved to a stack of its own (a stack made by hand, or the
// other object's new stack exists already): nothing ran, and nothing will until a person
// moves or removes the stack, or the object is given another name.
var ErrStackOfAnother = errors.New("the stack holds another KindCustomHttp's objects")

// settleName makes sure the stack stackName is this object's before an operation opens it,
// once per stackName and process (the named set): the migration of a stack of the rule before
// Name's. Two cases cost CLI runs, both only for names of MaxStackNameLength characters:
//   - stackName is shortened (it holds hashMarker): when it does not exist and its legacy name
//     does, with this object's objects or none (and the legacy name is nobody's whole name),
//     the legacy stack is renamed to stackName (migrateLegacy).
//   - stackName is whole but has a legacy name's shape: when it holds another object's
//     objects, and stackName is that object's legacy name, the stack is moved to that object's
//     new name, and this object gets a new stack (reclaim).
//
// Errors: ErrStackOfAnother (reclaim); the backend's, classified.
func (m *Manager) settleName(ctx context.Context, stackName string) error {
	m.mu.Lock()
	done := m.named[stackName]
	m.mu.Unlock()
	if done {
		return nil
	}
	var err error
	switch {
	case legacyNameOf(stackName) != "":
		err = m.migrateLegacy(ctx, stackName, legacyNameOf(stackName))
	case legacyShaped(stackName):
		err = m.reclaim(ctx, stackName)
	}
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.named[stackName] = true
	m.mu.Unlock()
	return nil
}

// legacyShaped reports whether name could be a shortened name of the rule before Name's:
// MaxStackNameLength characters ending in '-' and nameHashLength lower-case hex digits.
func legacyShaped(name string) bool {
	i := MaxStackNameLength - nameHashLength - 1
	if len(name) != MaxStackNameLength || name[i] != legacyHashMarker {
		return false
	}
	return strings.Trim(name[i+1:], "0123456789abcdef") == ""
}

// wholeName reports whether name is a name Name leaves whole, "<cluster>.<namespace>.<name>".
func wholeName(name string) bool {
	parts := strings.Split(name, ".")
	if len(parts) != 3 {
		return false
	}
	again, err := Name(parts[0], parts[1], parts[2])
	return err == nil && again == name
}

// migrateLegacy renames legacy to stackName when stackName does not exist and legacy holds the
// objects of the KindCustomHttp whose Name is stackName, or holds none and is nobody's whole
// name. Otherwise it leaves both: stackName is made as any new stack is.
func (m *Manager) migrateLegacy(ctx context.Context, stackName, legacy string) error {
	if _, err := m.open(ctx, stackName, false); err == nil {
		return nil
	} else if !auto.IsSelectStack404Error(err) {
		return fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	d, found, err := m.stateOf(ctx, legacy)
	if err != nil || !found {
		return err
	}
	ns, name, err := ownerOf(d)
	if err != nil {
		slog.Warn("a stack of the rule before '_' is left where it is: its state names more than one object", "stack", legacy, "error", err)
		return nil
	}
	switch {
	case name == "" && wholeName(legacy):
		slog.Info("an empty stack of the rule before '_' is left to the object whose whole name it is", "stack", legacy, "new", stackName)
		return nil
	case name != "":
		if own, err := Name(m.cfg.ClusterName, ns, name); err != nil || own != stackName {
			slog.Info("a stack of the rule before '_' holds another object's objects: left where it is", "stack", legacy, "holds", ns+"/"+name)
			return nil
		}
	}
	return m.rename(ctx, legacy, stackName)
}

// reclaim is settleName's second case: stackName, a whole name of a legacy name's shape,
// exists and holds the objects of another KindCustomHttp whose legacy name it is. That stack
// is renamed to the other's new name, and stackName no longer exists. Errors:
// ErrStackOfAnother when it holds another object's objects and cannot be moved: its state names
// an object whose legacy name is not stackName, names several, or the other's new stack exists.
func (m *Manager) reclaim(ctx context.Context, stackName string) error {
	d, found, err := m.stateOf(ctx, stackName)
	if err != nil || !found {
		return err
	}
	ns, name, err := ownerOf(d)
	if err != nil {
		return fmt.Errorf("stack %s: %w: %w", stackName, ErrStackOfAnother, err)
	}
	if name == "" {
		return nil
	}
	if own, err := Name(m.cfg.ClusterName, ns, name); err == nil && own == stackName {
		return nil
	}
	target, _ := Name(m.cfg.ClusterName, ns, name)
	if legacy, err := LegacyName(m.cfg.ClusterName, ns, name); err != nil || legacy != stackName {
		return fmt.Errorf("stack %s: %w: KindCustomHttp %s/%s's (the stack of that object is %s): move or remove the stack, or give this object another name",
			stackName, ErrStackOfAnother, ns, name, target)
	}
	if _, err := m.open(ctx, target, false); err == nil {
		return fmt.Errorf("stack %s: %w: KindCustomHttp %s/%s's, whose stack %s exists too: move or remove one of them, or give this object another name",
			stackName, ErrStackOfAnother, ns, name, target)
	} else if !auto.IsSelectStack404Error(err) {
		return fmt.Errorf("select stack %s: %w", target, m.classifyStack(ctx, target, err))
	}
	return m.rename(ctx, stackName, target)
}

// stateOf is stackName's deployment (exportDeployment's), found false when the stack does not
// exist. Errors are classified.
func (m *Manager) stateOf(ctx context.Context, stackName string) (d map[string]any, found bool, err error) {
	if _, err := m.open(ctx, stackName, false); auto.IsSelectStack404Error(err) {
		return nil, false, nil
	} else if err != nil {
		return nil, false, fmt.Errorf("select stack %s: %w", stackName, m.classifyStack(ctx, stackName, err))
	}
	d, _, err = m.exportOpened(ctx, stackName)
	return d, err == nil, err
}

// rename renames the stack from to to (`pulumi stack rename`, which takes from's lock and
// rewrites the URNs of its resources, so that the next preview of the same program finds no
// change), moves from's workspace settings (its Pulumi.<stack>.yaml, the passphrase salt) to
// to's workspace, and forgets from. A rename that another process did meanwhile (from gone, to
// there) is no error. Errors: the run's, classified.
func (m *Manager) rename(ctx context.Context, from, to string) error {
	dir := filepath.Join(m.cfg.WorkRoot, from)
	if err := m.writeWorkspace(from); err != nil {
		return err
	}
	stdout, stderr, code, err := m.cmd.Run(ctx, dir, nil, nil, nil, m.runEnv(), "stack", "rename", to, "--stack", from)
	if err != nil {
		derr := m.diagnosed(ctx, from, &cliError{op: "stack rename", code: code, stdout: stdout, stderr: stderr, err: err}, false, nil)
		if _, oerr := m.open(ctx, to, false); oerr == nil && stackNotFound(derr) {
			return m.forget(from)
		}
		return fmt.Errorf("rename stack %s to %s: %w", from, to, m.classifyStack(ctx, from, derr))
	}
	newDir := filepath.Join(m.cfg.WorkRoot, to)
	if err := os.MkdirAll(newDir, 0o700); err != nil {
		return fmt.Errorf("create workspace directory: %w", err)
	}
	// The CLI renames the settings file in the directory it ran in; an older one leaves it.
	for _, f := range []string{"Pulumi." + to + ".yaml", "Pulumi." + from + ".yaml"} {
		if err := os.Rename(filepath.Join(dir, f), filepath.Join(newDir, "Pulumi."+to+".yaml")); err == nil {
			break
		}
	}
	slog.Info("moved a stack named by the rule before '_' to its object's stack name", "stack", from, "new", to)
	return m.forget(from)
}

// ownerOf is the KindCustomHttp, namespace and name, whose objects the deployment d (a stack's
// state, as `pulumi stack export` gives it) holds: what its Kubernetes resources (the
// recorded ones and those of pending operations) carry as namespace and infra.LabelInstance,
// and what its stack outputs name (infra.OutputNamespace, infra.OutputDeploymentName). Both
// "" when it holds none. An error when they name more than one object.
func ownerOf(d map[string]any) (ns, name string, err error) {
	seen := map[[2]string]bool{}
	note := func(ns, name any) {
		n, _ := ns.(string)
		o, _ := name.(string)
		if o != "" {
			seen[[2]string{n, o}] = true
		}
	}
	look := func(r map[string]any) {
		typ, _ := r["type"].(string)
		switch {
		case typ == "pulumi:pulumi:Stack":
			outs, _ := r["outputs"].(map[string]any)
			if outs[infra.OutputDeploymentName] != nil {
				note(outs[infra.OutputNamespace], outs[infra.OutputDeploymentName])
			}
		case strings.HasPrefix(typ, "kubernetes:"):
			for _, key := range []string{"outputs", "inputs"} {
				props, _ := r[key].(map[string]any)
				meta, _ := props["metadata"].(map[string]any)
				labels, _ := meta["labels"].(map[string]any)
				if labels[infra.LabelInstance] != nil {
					note(meta["namespace"], labels[infra.LabelInstance])
					break
				}
			}
		}
	}
	rs, _ := d["resources"].([]any)
	for _, r := range rs {
		if r, ok := r.(map[string]any); ok {
			look(r)
		}
	}
	ops, _ := d["pending_operations"].([]any)
	for _, op := range ops {
		op, _ := op.(map[string]any)
		if r, ok := op["resource"].(map[string]any); ok {
			look(r)
		}
	}
	if len(seen) > 1 {
		var all []string
		for k := range seen {
			all = append(all, k[0]+"/"+k[1])
		}
		slices.Sort(all)
		return "", "", fmt.Errorf("its state names the objects of %s", strings.Join(all, ", "))
	}
	for k := range seen {
		return k[0], k[1], nil
	}
	return "", "", nil
}
