package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// TestTenantEnvCannotReconfigureServer is what a tenant tries against the default server: a
// KindCustomHttp whose envFrom names a ConfigMap that sets HTTP_SERVER_CONFIG=/proc/self/x
// (and the listen address) beside a Secret, so that GET /config/environ would serve the pod's
// environment with the Secret's value. The operator makes the Deployment; the local cluster's
// pods are not real (kwok), so the test then does what the kubelet would: it starts the real
// http-server binary with the live container's arguments and the environment its envFrom
// gives, the ConfigMap volume laid out as the kubelet lays it out in a temporary directory
// (the only rewrite: /config is that directory, and the listen address 127.0.0.1). The server
// must serve the object's own ConfigMap keys and nothing else.
func TestTenantEnvCannotReconfigureServer(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	const planted = "planted-db-password-5d1e"
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-env"},
		Data:       map[string]string{"HTTP_SERVER_CONFIG": "/proc/self/x", "HTTP_SERVER_LISTEN": ":18080"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data:       map[string][]byte{"DB_PASSWORD": []byte(planted)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startOperator(t, c, ns)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersion.String(), "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "tenant", "namespace": ns},
		"spec": map[string]any{
			"replicaCount": int64(1), "port": int64(80),
			"configMapData": map[string]any{"hostports": "", "index.html": "hello from the ConfigMap"},
			"envFrom": []any{
				map[string]any{"configMapRef": map[string]any{"name": "tenant-env"}},
				map[string]any{"secretRef": map[string]any{"name": "db"}},
			},
		},
	}}
	if _, err := c.Client.Resource(api.GroupVersionResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, ns, "tenant", 1)

	dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, "tenant", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	ctr := pod.Containers[0]
	if ctr.Image != api.DefaultImage || len(ctr.Command) != 0 {
		t.Fatalf("container image %q, command %v: want the default server by its entrypoint", ctr.Image, ctr.Command)
	}
	for _, flag := range []string{"--listen=", "--config="} {
		if !slices.ContainsFunc(ctr.Args, func(a string) bool { return strings.HasPrefix(a, flag) }) {
			t.Errorf("container args %q lack %s...: the operator must pass the server's settings", ctr.Args, flag)
		}
	}

	// The kubelet's part: the environment from envFrom, and the ConfigMap volume at /config.
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, src := range ctr.EnvFrom {
		switch {
		case src.ConfigMapRef != nil:
			cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, src.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range cm.Data {
				env = append(env, src.Prefix+k+"="+v)
			}
		case src.SecretRef != nil:
			s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, src.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range s.Data {
				env = append(env, src.Prefix+k+"="+string(v))
			}
		}
	}
	mount := ctr.VolumeMounts[0]
	cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, pod.Volumes[0].ConfigMap.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	volume := configMapVolume(t, cm.Data)
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	args := []string{"--drain-delay=0s"}
	listen := false
	for _, a := range ctr.Args {
		switch {
		case strings.HasPrefix(a, "--listen="):
			a, listen = "--listen="+addr, true
		case strings.Contains(a, "="+mount.MountPath+"/"):
			a = strings.Replace(a, "="+mount.MountPath+"/", "="+volume+"/", 1)
		}
		args = append(args, a)
	}
	if !listen {
		args = append(args, "--listen="+addr) // never on every interface
	}

	bin := filepath.Join(t.TempDir(), "http-server")
	build := exec.Command("go", "build", "-o", bin, "./cmd/http-server")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	srv := exec.Command(bin, args...)
	srv.Env = env
	var logs testenv.SyncBuffer
	srv.Stdout, srv.Stderr = &logs, &logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Process.Signal(os.Interrupt)
		_ = srv.Wait()
		if t.Failed() {
			t.Logf("server args %q, log:\n%s", args, logs.String())
		}
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for code, _ := get("/healthz"); code != http.StatusOK; code, _ = get("/healthz") {
		if time.Now().After(deadline) {
			t.Fatalf("the server does not answer on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get("/config/index.html"); code != http.StatusOK || body != "hello from the ConfigMap" {
		t.Errorf("GET /config/index.html = %d %q, want the ConfigMap's value", code, body)
	}
	for _, path := range []string{"/config/environ", "/config/cmdline", "/config/x"} {
		if code, body := get(path); code != http.StatusNotFound || strings.Contains(body, planted) {
			t.Errorf("GET %s = %d %q, want 404 and not the Secret's value", path, code, body)
		}
	}
}

// configMapVolume lays data out in a new directory as the kubelet lays out a ConfigMap volume
// (<dir>/..<timestamp>/<key> files, <dir>/..data -> that directory, <dir>/<key> -> ..data/<key>)
// and returns the directory.
func configMapVolume(t *testing.T, data map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range data {
		if err := os.WriteFile(filepath.Join(ts, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(ts), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	return dir
}
