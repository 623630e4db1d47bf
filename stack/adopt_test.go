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

// TestImportRebuildsLostStack: the objects of a stack that is lost (the backend URL changed, so
// the new backend holds no stack) are taken into a new stack two ways, without touching them:
//   - an up of the program (what the watcher runs for a living object): the provider's upsert
//     applies the same spec over the live objects, which keep their UID and generation; the next
//     up changes nothing;
//   - RunOptions.Adopt with infra.ProgramAdopting (what a delete with on-missing-stack=adopt
//     runs): a preview shows 3 imports, the up imports the 3 and changes nothing, and the
//     rebuilt stack's destroy deletes them.
//
// It also pins why an import is only for a stack about to be destroyed: the imported inputs
// hold only the objects' names (the provider reads them under a new field manager), so a
// preview of the program on the imported stack plans a replacement of the Deployment. Without
// and with the engine host.
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
			untouched := func(what string) {
				t.Helper()
				after, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
				if err != nil || after.UID != dep.UID || after.Generation != dep.Generation {
					t.Fatalf("Deployment after %s: %v (uid %s generation %d, was %s %d): want it untouched",
						what, err, after.GetUID(), after.GetGeneration(), dep.UID, dep.Generation)
				}
			}

			// An up of the program over the live objects.
			upsert := migrationManager(t, filepath.Join(t.TempDir(), "upsert"), host, c.Kubeconfig)
			res, err := upsert.Up(ctx, name, infra.Program(d), RunOptions{})
			if err != nil || res.Changes["create"] != 4 {
				t.Fatalf("up over the live objects: %v, %v: want the stack and its 3 objects created", res.Changes, err)
			}
			untouched("the up over the live objects")
			if again, err := upsert.Up(ctx, name, infra.Program(d), RunOptions{}); err != nil || again.Changed() {
				t.Fatalf("the next up: %v, %v: want no change", again.Changes, err)
			}

			// The import a delete runs.
			m := migrationManager(t, filepath.Join(t.TempDir(), "imported"), host, c.Kubeconfig)
			adopting := RunOptions{Adopt: infra.ProgramAdopting(d, all)}
			prev, err := m.Preview(ctx, name, infra.Program(d), adopting)
			if err != nil || prev.Changes["import"] != 3 || prev.Changes["create"] != 1 {
				t.Fatalf("preview of the import: %v, %v: want 3 imports, the stack the one create", prev.Changes, err)
			}
			res, err = m.Up(ctx, name, infra.Program(d), adopting)
			if err != nil || res.Changes["import"] != 3 || res.Changes["create"] != 1 || len(res.Changes) != 2 {
				t.Fatalf("up of the import: %v, %v: want {import: 3, create: 1}", res.Changes, err)
			}
			untouched("the import")
			if p, err := m.Preview(ctx, name, infra.Program(d), RunOptions{}); err != nil || p.Changes["replace"] == 0 {
				t.Logf("preview of the program on the imported stack: %v, %v", p.Changes, err)
				t.Fatal("an import now keeps the objects' inputs: a living object's lost stack could be rebuilt by import (infra.Adopt)")
			}
			des, err := m.Destroy(ctx, name, RunOptions{})
			if err != nil || des.Changes["delete"] < 3 {
				t.Fatalf("destroy of the imported stack: %v, %v: want the 3 objects deleted", des.Changes, err)
			}
			gone, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, d.Name, metav1.GetOptions{})
			if !apierrors.IsNotFound(err) && (err != nil || gone.DeletionTimestamp == nil) {
				t.Fatalf("Deployment after the destroy: %v: want it going", err)
			}
		})
	}
}
