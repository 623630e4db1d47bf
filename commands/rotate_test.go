package commands

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestRotatePassphraseNeedsThePrevious: without --previous-passphrase-file there is nothing to
// rotate from: exit ExitInvalidInput, saying which flag, before anything is opened.
func TestRotatePassphraseNeedsThePrevious(t *testing.T) {
	t.Setenv("PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE", "")
	app := App()
	var out strings.Builder
	app.Writer, app.ErrWriter = &out, &out
	err := app.Run([]string{"pulumi-operator", "rotate-passphrase"})
	if code := ExitCode(err); code != ExitInvalidInput || err == nil || !strings.Contains(err.Error(), "--previous-passphrase-file") {
		t.Fatalf("exit %d, %v; want %d naming --previous-passphrase-file", code, err, ExitInvalidInput)
	}
}

// TestRequestReconcile: a stack whose object is here gets the reconcile request; one whose
// name says no object, or whose object is not in this cluster, is an error that says to use
// --direct.
func TestRequestReconcile(t *testing.T) {
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "web", "namespace": "shop"}}}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{api.GroupVersionResource: "KindCustomHttpList"}, obj)
	ctx := context.Background()
	if err := requestReconcile(ctx, client, stack.StackInfo{Name: "c.shop.web", Namespace: "shop", CRName: "web"}); err != nil {
		t.Fatalf("request for an object that exists: %v", err)
	}
	got, _ := client.Resource(api.GroupVersionResource).Namespace("shop").Get(ctx, "web", metav1.GetOptions{})
	if v := got.GetAnnotations()[api.ReconcileRequestAnnotation]; !strings.HasPrefix(v, "rotate-passphrase ") {
		t.Errorf("annotation %s = %q", api.ReconcileRequestAnnotation, v)
	}
	for name, s := range map[string]stack.StackInfo{
		"no object in the name": {Name: "hashed-0123"},
		"object elsewhere":      {Name: "c.shop.gone", Namespace: "shop", CRName: "gone"},
	} {
		if err := requestReconcile(ctx, client, s); err == nil || !strings.Contains(err.Error(), "--direct") {
			t.Errorf("%s: %v, want an error that says --direct", name, err)
		}
	}
}
