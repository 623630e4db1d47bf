package stack

import (
	"context"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestImportRebuildsLostStack: the objects of a stack that is lost (here: the backend URL
// changed, so the new backend holds no stack) are taken into a new stack by import
// (RunOptions.Adopt with infra.ProgramAdopting) without touching them: a preview shows three
// imports and creates only the stack, the up imports the three (no replace or delete), the
// Deployment keeps its UID and generation (no pod rolled), the next up changes nothing, a
// change that replaces the Service goes through on the rebuilt stack (Adopt is not run on a
// stack that exists), and the rebuilt stack's destroy deletes the objects. infra.Adopt.Only
// imports and changes nothing at all. Without and with the engine host. The code before infra.Adopt had only infra.Program, whose preview
// here shows three creates (checked too): the up would create them over the live objects (the
// provider's upsert).
func TestImportRebuildsLostStack(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ctx := context.Background()
	all := infra.Adopt{ConfigMap: true, Deployment: true, Service: true}
	for mode, host := range map[string]bool{"cli": false, "engine host": true} {
		t.Run(mode, func(t *testing.T) {
			ns := c.Namespace(t)
			d := desired(ns, "lost")
			first := migrationManager(t, filepath.Join(t.TempDir(), "first"), host, c.Kubeconfig)
			name, _ := first.StackName(ns, d.Name)
			if _, err := first.Up(ctx, name, infra.Program(d), RunOptions{}); err != nil {
				t.Fatal(err)
			}
			dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}

			// Only: imported, nothing else, in a backend of its own (the root stack resource is
			// the one create).
			only := all
			only.Only = true
			res, err := migrationManager(t, filepath.Join(t.TempDir(), "only"), host, c.Kubeconfig).
				Up(ctx, name, infra.ProgramAdopting(d, only), RunOptions{})
			if err != nil || res.Changes["import"] != 3 || res.Changes["create"] != 1 || len(res.Changes) != 2 {
				t.Fatalf("up importing only: %v, %v: want {import: 3, create: 1}", res.Changes, err)
			}

			m := migrationManager(t, filepath.Join(t.TempDir(), "rebuilt"), host, c.Kubeconfig)
			// What the code before infra.Adopt ran: creates over the live objects.
			if base, err := m.Preview(ctx, name, infra.Program(d), RunOptions{}); err != nil || base.Changes["create"] != 4 {
				t.Fatalf("preview without adoption: %v, %v: want 4 creates (the objects and the stack)", base.Changes, err)
			}
			adopting := RunOptions{Adopt: infra.ProgramAdopting(d, all)}
			prev, err := m.Preview(ctx, name, infra.Program(d), adopting)
			if err != nil || prev.Changes["import"] != 3 || prev.Changes["create"] != 1 {
				t.Fatalf("preview of the rebuild: %v, %v: want 3 imports, the stack the one create", prev.Changes, err)
			}
			res, err = m.Up(ctx, name, infra.Program(d), adopting)
			if err != nil || res.Changes["import"] != 3 || res.Changes["create"] != 1 {
				t.Fatalf("up of the rebuild: %v, %v: want 3 imports, the stack the one create", res.Changes, err)
			}
			for _, op := range []string{"replace", "delete", "create-replacement", "delete-replaced"} {
				if res.Changes[op] != 0 {
					t.Fatalf("up of the rebuild: %v: want no %s", res.Changes, op)
				}
			}
			after, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil || after.UID != dep.UID || after.Generation != dep.Generation {
				t.Fatalf("Deployment after the rebuild: %v (uid %s generation %d, was %s %d): want it untouched",
					err, after.GetUID(), after.GetGeneration(), dep.UID, dep.Generation)
			}
			again, err := m.Up(ctx, name, infra.Program(d), adopting)
			if err != nil || again.Changed() {
				t.Fatalf("up of the rebuilt stack: %v, %v: want no change (Adopt runs only on a new stack)", again.Changes, err)
			}
			// A change that replaces the Service (Headless changes its clusterIP) on the rebuilt
			// stack: Pulumi refuses to replace a resource declared with an import ID, which
			// RunOptions.Adopt never declares on a stack that exists.
			headless := d
			headless.ServiceType = api.ServiceTypeHeadless
			rep, err := m.Up(ctx, name, infra.Program(headless), RunOptions{Adopt: infra.ProgramAdopting(headless, all)})
			if err != nil || rep.Changes["replace"] != 1 {
				t.Fatalf("up replacing the Service of the rebuilt stack: %v, %v: want 1 replace", rep.Changes, err)
			}
			des, err := m.Destroy(ctx, name, RunOptions{})
			if err != nil || des.Changes["delete"] < 3 {
				t.Fatalf("destroy of the rebuilt stack: %v, %v: want the 3 objects deleted", des.Changes, err)
			}
			gone, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) && (err != nil || gone.DeletionTimestamp == nil) {
				t.Fatalf("Deployment after the destroy: %v, deletionTimestamp %v: want it going", err, gone.DeletionTimestamp)
			}
		})
	}
}
