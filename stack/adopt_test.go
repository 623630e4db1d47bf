package stack

import (
	"context"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// TestImportRebuildsLostStack: the objects of a stack that is lost (here: the backend URL
// changed, so the new backend holds no stack) are taken into a new stack by import
// (infra.ProgramAdopting) without touching them: a preview shows three imports and no create,
// the up imports the three (no create, replace or delete), the Deployment keeps its UID and
// generation (no pod rolled), a plain up afterwards changes nothing, and the rebuilt stack's
// destroy deletes the objects. infra.Adopt.Only imports and changes nothing at all. Without
// and with the engine host. The code before infra.Adopt had only infra.Program, whose preview
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

			// Only: imported, nothing else, in a backend of its own.
			only := all
			only.Only = true
			res, err := migrationManager(t, filepath.Join(t.TempDir(), "only"), host, c.Kubeconfig).
				Up(ctx, name, infra.ProgramAdopting(d, only), RunOptions{})
			if err != nil || res.Changes["import"] != 3 || len(res.Changes) != 1 {
				t.Fatalf("up importing only: %v, %v: want {import: 3}", res.Changes, err)
			}

			m := migrationManager(t, filepath.Join(t.TempDir(), "rebuilt"), host, c.Kubeconfig)
			// What the code before infra.Adopt ran: creates over the live objects.
			if base, err := m.Preview(ctx, name, infra.Program(d), RunOptions{}); err != nil || base.Changes["create"] != 3 {
				t.Fatalf("preview without adoption: %v, %v: want 3 creates", base.Changes, err)
			}
			prev, err := m.Preview(ctx, name, infra.ProgramAdopting(d, all), RunOptions{})
			if err != nil || prev.Changes["import"] != 3 || prev.Changes["create"] != 0 {
				t.Fatalf("preview of the rebuild: %v, %v: want 3 imports, no create", prev.Changes, err)
			}
			res, err = m.Up(ctx, name, infra.ProgramAdopting(d, all), RunOptions{})
			if err != nil || res.Changes["import"] != 3 {
				t.Fatalf("up of the rebuild: %v, %v: want 3 imports", res.Changes, err)
			}
			for _, op := range []string{"create", "replace", "delete", "create-replacement", "delete-replaced"} {
				if res.Changes[op] != 0 {
					t.Fatalf("up of the rebuild: %v: want no %s", res.Changes, op)
				}
			}
			after, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if err != nil || after.UID != dep.UID || after.Generation != dep.Generation {
				t.Fatalf("Deployment after the rebuild: %v (uid %s generation %d, was %s %d): want it untouched",
					err, after.GetUID(), after.GetGeneration(), dep.UID, dep.Generation)
			}
			again, err := m.Up(ctx, name, infra.Program(d), RunOptions{})
			if err != nil || again.Changed() {
				t.Fatalf("plain up of the rebuilt stack: %v, %v: want no change", again.Changes, err)
			}
			des, err := m.Destroy(ctx, name, RunOptions{})
			if err != nil || des.Changes["delete"] != 3 {
				t.Fatalf("destroy of the rebuilt stack: %v, %v: want 3 deletes", des.Changes, err)
			}
			gone, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) && (err != nil || gone.DeletionTimestamp == nil) {
				t.Fatalf("Deployment after the destroy: %v, deletionTimestamp %v: want it going", err, gone.DeletionTimestamp)
			}
		})
	}
}
