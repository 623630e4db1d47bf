package watcher

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// realProgram runs ups and destroys of the real infra.Program through stack.Manager (the
// Kubernetes provider plugin applies the objects), counted in the programStacks' counters.
type realProgram struct{ *programStacks }

func (r realProgram) Up(ctx context.Context, d api.Desired, adopt infra.Adopt, opts stack.RunOptions) (stack.Result, error) {
	r.ups.Add(1)
	return ManagerStacks{r.Manager}.Up(ctx, d, adopt, opts)
}

func (r realProgram) Destroy(ctx context.Context, stackName string, opts stack.RunOptions) (stack.Result, error) {
	r.destroys.Add(1)
	return r.Manager.Destroy(ctx, stackName, opts)
}

// spec.envFrom: a change of a named ConfigMap's or Secret's data reaches the stack within
// seconds (a new env digest, so a new up that rolls the pods); a missing source is a retried
// wait; the Secret's value never reaches the Pulumi state, status or Events. The real program
// runs, so what the watcher hands it about the env sources is in the state the test searches.
func TestEnvFromSources(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	// A long resync: only the ConfigMap and Secret informers can notice the changes in time.
	f := startWrapped(t, Options{Resync: time.Hour, SecretNamespaces: []string{"*"}}, func(p *programStacks) Stacks { return realProgram{p} })
	ctx := context.Background()
	const secretValue = "s3cr3t-value-that-must-not-leak"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "env-a"}, Data: map[string]string{"MODE": "one"}}
	if _, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.create(t, "web", "  replicaCount: 1\n  port: 80\n  envFrom:\n  - configMapRef: {name: env-a}\n  - secretRef: {name: creds}\n    prefix: DB_\n")

	// The Secret does not exist yet: a wait with a message that says what to do.
	o := f.waitFor(t, "web", "EnvSourceMissing", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonEnvSourceMissing
	})
	if msg := cond(o, api.ConditionReady).Message; !strings.Contains(msg, "Secret "+f.ns+"/creds") || !strings.Contains(msg, "create it") {
		t.Fatalf("Ready message %q", msg)
	}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"PASSWORD": secretValue}}
	if _, err := f.cluster.Kube.CoreV1().Secrets(f.ns).Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "web", "Ready once the Secret exists", readyAt(1))
	ups := f.stacks.ups.Load()
	digest := f.envDigestAnnotation(t, "web", "")

	// A ConfigMap data change: one more up, no spec change.
	cm.Data["MODE"] = "two"
	if _, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "an up after the ConfigMap change", func() bool { return f.stacks.ups.Load() == ups+1 })
	f.waitFor(t, "web", "Ready after the ConfigMap change", readyAt(1))
	digest = f.envDigestAnnotation(t, "web", digest)

	// A Secret data change: one more.
	sec, _ = f.cluster.Kube.CoreV1().Secrets(f.ns).Get(ctx, "creds", metav1.GetOptions{})
	sec.Data["PASSWORD"] = []byte(secretValue + "-rotated")
	if _, err := f.cluster.Kube.CoreV1().Secrets(f.ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "an up after the Secret change", func() bool { return f.stacks.ups.Load() == ups+2 })
	o = f.waitFor(t, "web", "Ready after the Secret change", readyAt(1))
	digest = f.envDigestAnnotation(t, "web", digest)

	// What the program received about the env sources (their digest) reaches the state, so the
	// walk below searches where the Secret's value would be if it were handed on. (The
	// checkpoint follows the Deployment's update once the provider's await is over.)
	stackName, _ := f.stacks.StackName(f.ns, "web")
	statePath := filepath.Join(f.backend, ".pulumi", "stacks", "kindcustomhttp", stackName+".json")
	poll(t, "the pod template's env digest in the stack state", func() bool {
		state, err := os.ReadFile(statePath)
		return err == nil && strings.Contains(string(state), digest)
	})
	o = f.waitFor(t, "web", "Ready after the Secret change", readyAt(1))

	// The value is nowhere: stack state and workspace files, status, Events.
	_ = filepath.Walk(filepath.Dir(f.backend), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), secretValue) {
				t.Errorf("the Secret's value is in %s", p)
			}
		}
		return nil
	})
	status, _ := yaml.Marshal(o)
	events, _ := f.cluster.Kube.CoreV1().Events(f.ns).List(ctx, metav1.ListOptions{})
	all, _ := yaml.Marshal(events)
	if strings.Contains(string(status), secretValue) || strings.Contains(string(all), secretValue) {
		t.Error("the Secret's value is in the object's status or Events")
	}
}

// envDigestAnnotation waits until the Deployment name's pod template carries an env digest
// other than before ("" for any) and returns it: each change of an envFrom source's data must
// roll the pods.
func (f *fixture) envDigestAnnotation(t *testing.T, name, before string) string {
	t.Helper()
	var got string
	poll(t, "a new env digest on the pod template of "+name, func() bool {
		d, err := f.cluster.Kube.AppsV1().Deployments(f.ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = d.Spec.Template.Annotations[infra.EnvDigestAnnotation]
		return got != "" && got != before
	})
	return got
}
