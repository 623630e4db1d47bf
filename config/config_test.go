// Tests of the install manifests: config/ (kustomize) and charts/pulumi-operator (Helm). The chart
// lints and renders, grants exactly what config/rbac grants and runs the same pod; both install
// into the local cluster; the RBAC, used through the ServiceAccount's own token, allows what the
// operator does and denies the rest; the real operator runs on nothing but that token; and the
// versions pinned across Dockerfile, Makefile, go.mod files, chart and kustomization agree.
// manifests_test.go checks that the CRD and ClusterRoles are what controller-gen generates from
// the markers, crd_test.go what the CRD admits on a real apiserver.
package config_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/version"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

const (
	chartDir = "charts/pulumi-operator"
	crdFile  = "groupsp.measutosh.dev_kindcustomhttps.yaml"
	// The names config/default installs, which are also the chart's for a release called
	// pulumi-operator in pulumi-operator-system.
	operatorNS   = "pulumi-operator-system"
	operatorName = "pulumi-operator"
	secretName   = "pulumi-operator-secrets"
	leaseName    = "pulumi-operator.groupsp.measutosh.dev"
	imageRepo    = "ghcr.io/pulumi-operator/pulumi-operator"

	testTimeout  = 2 * time.Minute
	pollInterval = 200 * time.Millisecond
	testPassword = "test-passphrase"
)

func root(parts ...string) string {
	return filepath.Join(append([]string{testenv.RepoRoot()}, parts...)...)
}

// helmCLI returns the pinned helm built by `make helm` (bin/helm).
func helmCLI(t *testing.T) string {
	t.Helper()
	p := root("bin", "helm")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "no helm at "+p+": run `make helm` (hack/build-helm.sh)")
	}
	return p
}

func kubectlCLI(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		if _, serr := os.Stat("/usr/bin/kubectl"); serr != nil {
			testenv.Missing(t, "no kubectl on PATH")
		}
		p = "/usr/bin/kubectl"
	}
	return p
}

// run runs a command in the repository root and returns its stdout; stderr is part of the error.
func run(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// helm runs bin/helm with its caches and configuration in a temporary directory, never in $HOME.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	env := []string{"HELM_CACHE_HOME=" + filepath.Join(home, "cache"), "HELM_CONFIG_HOME=" + filepath.Join(home, "config"),
		"HELM_DATA_HOME=" + filepath.Join(home, "data"), "KUBECONFIG=/dev/null"}
	return run(t, env, helmCLI(t), args...)
}

// decode splits a multi-document YAML stream into objects, dropping empty documents.
func decode(t *testing.T, data string) []*unstructured.Unstructured {
	t.Helper()
	d := k8syaml.NewYAMLOrJSONDecoder(strings.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := d.Decode(&m); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("decode manifests: %v", err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// kustomize renders a kustomization directory (relative to the repository) with kubectl.
func kustomize(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	out, err := run(t, nil, kubectlCLI(t), "kustomize", root(dir))
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, out)
}

// helmTemplate renders the chart as release pulumi-operator in pulumi-operator-system.
func helmTemplate(t *testing.T, args ...string) ([]*unstructured.Unstructured, error) {
	t.Helper()
	out, err := helm(t, append([]string{"template", operatorName, root(chartDir), "--namespace", operatorNS}, args...)...)
	if err != nil {
		return nil, err
	}
	return decode(t, out), nil
}

func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func mustFind(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	o := find(objs, kind, name)
	if o == nil {
		t.Fatalf("no %s %s among %s", kind, name, names(objs))
	}
	return o
}

func names(objs []*unstructured.Unstructured) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.GetKind()+"/"+o.GetName())
	}
	return strings.Join(s, ", ")
}

func convert[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("convert %s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

func toYAML(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}

// --- The chart alone ---------------------------------------------------------------------------

func TestChartLints(t *testing.T) {
	if out, err := helm(t, "lint", "--strict", root(chartDir), "--set", "passphrase="+testPassword); err != nil {
		t.Fatalf("helm lint: %v\n%s", err, out)
	}
}

// TestChartReadme: the chart's README.md lists every value of values.yaml (each key, and each
// key of a nested group such as image or persistence, as `path`), and values.schema.json
// describes every top-level value (helm lint --strict above also checks the defaults against
// it).
func TestChartReadme(t *testing.T) {
	readme, err := os.ReadFile(root(chartDir, "README.md"))
	if err != nil {
		t.Fatalf("the chart has no README.md: %v", err)
	}
	var values map[string]any
	readYAML(t, root(chartDir, "values.yaml"), &values)
	var schema struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	b, err := os.ReadFile(root(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var missing []string
	for k, v := range values {
		sp, ok := schema.Properties[k]
		if !ok {
			t.Errorf("values.schema.json does not describe %s", k)
		}
		paths := []string{k}
		if m, ok := v.(map[string]any); ok && len(sp.Properties) > 0 {
			paths = nil
			for sub := range m {
				paths = append(paths, k+"."+sub)
			}
		}
		for _, p := range paths {
			if !bytes.Contains(readme, []byte("| `"+p+"` |")) {
				missing = append(missing, p)
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		t.Errorf("charts/pulumi-operator/README.md lists no row for %v: add them (with the value's comment from values.yaml)", missing)
	}
}

func TestChartTemplate(t *testing.T) {
	deployment := func(t *testing.T, objs []*unstructured.Unstructured) *appsv1.Deployment {
		return convert[appsv1.Deployment](t, mustFind(t, objs, "Deployment", operatorName))
	}
	envOf := func(d *appsv1.Deployment, name string) *corev1.EnvVar {
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == name {
				return &e
			}
		}
		return nil
	}
	volume := func(d *appsv1.Deployment, name string) corev1.Volume {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == name {
				return v
			}
		}
		return corev1.Volume{}
	}
	cases := map[string]struct {
		set     []string
		wantErr string
		check   func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		"defaults need a passphrase": {wantErr: "set passphrase"},
		"passphrase": {set: []string{"passphrase=" + testPassword}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			s := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName))
			if s.StringData["passphrase"] != testPassword || s.StringData["backend-url"] != "" {
				t.Errorf("Secret data = %v", s.StringData)
			}
			if s.Annotations["helm.sh/resource-policy"] != "keep" {
				t.Errorf("the passphrase Secret is not kept by helm uninstall: %v", s.Annotations)
			}
			pvc := mustFind(t, objs, "PersistentVolumeClaim", operatorName+"-state")
			if pvc.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("the state volume is not kept by helm uninstall: %v", pvc.GetAnnotations())
			}
			d := deployment(t, objs)
			if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
				t.Errorf("strategy %q with a ReadWriteOnce state volume, want Recreate", d.Spec.Strategy.Type)
			}
			if c := d.Spec.Template.Spec.Containers[0]; c.Image != imageRepo+":"+chartAppVersion(t) {
				t.Errorf("image %s, want the appVersion", c.Image)
			}
		}},
		"backend URL": {set: []string{"passphrase=x", "backendURL=postgres://u@db:5432/pulumi"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			s := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName))
			if s.StringData["backend-url"] != "postgres://u@db:5432/pulumi" {
				t.Errorf("Secret data = %v", s.StringData)
			}
			e := envOf(deployment(t, objs), "PULUMI_BACKEND_URL")
			if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != "backend-url" {
				t.Errorf("PULUMI_BACKEND_URL = %+v, want from the Secret's backend-url", e)
			}
		}},
		"existing secret": {set: []string{"existingSecret=mine"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if s := find(objs, "Secret", secretName); s != nil {
				t.Errorf("created Secret %s although existingSecret is set", s.GetName())
			}
			d := deployment(t, objs)
			if v := volume(d, "secrets"); v.Secret == nil || v.Secret.SecretName != "mine" {
				t.Errorf("secrets volume = %+v, want Secret mine", v)
			}
			if e := envOf(d, "PULUMI_BACKEND_URL"); e.ValueFrom.SecretKeyRef.Name != "mine" {
				t.Errorf("PULUMI_BACKEND_URL from %s, want mine", e.ValueFrom.SecretKeyRef.Name)
			}
		}},
		"backend credentials": {set: []string{"passphrase=x", "backendURL=postgres://u@db:5432/pulumi", "backendCredentials.pgpassword=pw",
			"backendCredentials.awsAccessKeyID=ak", "backendCredentials.awsSecretAccessKey=sk"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			s := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName))
			d := deployment(t, objs)
			for env, key := range map[string]string{"PGPASSWORD": "pgpassword", "AWS_ACCESS_KEY_ID": "aws-access-key-id", "AWS_SECRET_ACCESS_KEY": "aws-secret-access-key"} {
				if s.StringData[key] == "" {
					t.Errorf("Secret has no %s: %v", key, s.StringData)
				}
				e := envOf(d, env)
				if e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Key != key || e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional {
					t.Errorf("%s = %+v, want from the Secret's optional %s", env, e, key)
				}
			}
		}},
		"no backend credentials": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			s := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName))
			for _, key := range []string{"pgpassword", "aws-access-key-id", "aws-secret-access-key"} {
				if _, ok := s.StringData[key]; ok {
					t.Errorf("Secret has an empty %s", key)
				}
			}
		}},
		"existing secret and a passphrase":         {set: []string{"existingSecret=mine", "passphrase=x"}, wantErr: "existingSecret is set"},
		"existing secret and a pgpassword":         {set: []string{"existingSecret=mine", "backendCredentials.pgpassword=x"}, wantErr: "existingSecret is set"},
		"several replicas without leader election": {set: []string{"passphrase=x", "replicas=2", "leaderElection.enabled=false"}, wantErr: "replicas > 1 needs leaderElection"},
		"no leader election": {set: []string{"passphrase=x", "leaderElection.enabled=false"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if r := find(objs, "Role", operatorName+"-leader-election"); r != nil {
				t.Error("Lease Role rendered without leader election")
			}
			if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; slices.Contains(args, "--leader-elect") {
				t.Errorf("args %v", args)
			}
		}},
		"watch one namespace": {set: []string{"passphrase=x", "watchNamespace=team-a", "labelSelector=shard=1"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if find(objs, "ClusterRoleBinding", operatorName+"-manager") != nil {
				t.Error("manager ClusterRoleBinding rendered although watchNamespace limits the operator to team-a")
			}
			rb := mustFind(t, objs, "RoleBinding", operatorName+"-manager")
			if rb.GetNamespace() != "team-a" {
				t.Errorf("manager RoleBinding in %q, want team-a", rb.GetNamespace())
			}
			args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
			if !slices.Contains(args, "--namespace=team-a") || !slices.Contains(args, "--label-selector=shard=1") {
				t.Errorf("args %v", args)
			}
		}},
		"passphrase rotation": {set: []string{"passphrase=new", "passphraseRotation.previousPassphrase=old"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if s := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName)); s.StringData["previous-passphrase"] != "old" || s.StringData["passphrase"] != "new" {
				t.Errorf("Secret data = %v", s.StringData)
			}
			d := deployment(t, objs)
			if e := envOf(d, "PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE"); e == nil || e.Value != "/etc/pulumi-operator/secrets/previous-passphrase" {
				t.Errorf("PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE = %v", e)
			}
			if items := volume(d, "secrets").Secret.Items; len(items) != 2 || items[1].Key != "previous-passphrase" {
				t.Errorf("secrets volume items = %v, want passphrase and previous-passphrase", items)
			}
		}},
		"no passphrase rotation by default": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if e := envOf(deployment(t, objs), "PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE"); e != nil {
				t.Errorf("PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE = %q without passphraseRotation", e.Value)
			}
		}},
		"no Secrets by default": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, kind := range []string{"RoleBinding", "ClusterRoleBinding"} {
				if find(objs, kind, operatorName+"-secret-reader") != nil {
					t.Errorf("a %s grants Secrets although envFromSecrets.namespaces is empty", kind)
				}
			}
			if e := envOf(deployment(t, objs), "PULUMI_OPERATOR_SECRET_NAMESPACES"); e != nil {
				t.Errorf("PULUMI_OPERATOR_SECRET_NAMESPACES = %q without envFromSecrets.namespaces", e.Value)
			}
		}},
		"Secrets of two namespaces": {set: []string{"passphrase=x", "envFromSecrets.namespaces={team-a,team-b}"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var nss []string
			for _, o := range objs {
				if o.GetKind() == "RoleBinding" && o.GetName() == operatorName+"-secret-reader" {
					nss = append(nss, o.GetNamespace())
					if ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name"); ref != operatorName+"-secret-reader" {
						t.Errorf("RoleBinding in %s binds %s", o.GetNamespace(), ref)
					}
				}
			}
			if slices.Sort(nss); !slices.Equal(nss, []string{"team-a", "team-b"}) {
				t.Errorf("secret-reader RoleBindings in %v, want team-a and team-b", nss)
			}
			if e := envOf(deployment(t, objs), "PULUMI_OPERATOR_SECRET_NAMESPACES"); e == nil || e.Value != "team-a,team-b" {
				t.Errorf("PULUMI_OPERATOR_SECRET_NAMESPACES = %v, want team-a,team-b", e)
			}
		}},
		"schema: Secrets of a bad namespace": {set: []string{"passphrase=x", "envFromSecrets.namespaces={Team_A}"}, wantErr: "envFromSecrets"},
		"cluster name": {set: []string{"passphrase=x", "clusterName=prod"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if find(objs, "ClusterRole", operatorName+"-cluster-name") != nil {
				t.Error("the kube-system reader is rendered although clusterName is set")
			}
			if e := envOf(deployment(t, objs), "PULUMI_OPERATOR_CLUSTER_NAME"); e == nil || e.Value != "prod" {
				t.Errorf("PULUMI_OPERATOR_CLUSTER_NAME = %+v", e)
			}
		}},
		"no persistence": {set: []string{"passphrase=x", "persistence.enabled=false", "backendURL=s3://bucket"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if find(objs, "PersistentVolumeClaim", operatorName+"-state") != nil {
				t.Error("PersistentVolumeClaim rendered without persistence")
			}
			d := deployment(t, objs)
			if v := volume(d, "state"); v.EmptyDir == nil {
				t.Errorf("state volume = %+v, want an emptyDir", v)
			}
			if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
				t.Error("Recreate strategy without a ReadWriteOnce volume")
			}
		}},
		// values.schema.json: a wrong value fails helm lint, template and install, naming it.
		"schema: workers 0":         {set: []string{"passphrase=x", "workers=0"}, wantErr: "at '/workers': minimum: got 0, want 1"},
		"schema: log format":        {set: []string{"passphrase=x", "logFormat=xml"}, wantErr: "at '/logFormat': value must be one of 'text', 'json'"},
		"schema: log level":         {set: []string{"passphrase=x", "logLevel=verbose"}, wantErr: "at '/logLevel': value must be one of"},
		"schema: misspelt key":      {set: []string{"passphrase=x", "wokers=4"}, wantErr: "additional properties 'wokers' not allowed"},
		"schema: grace not integer": {set: []string{"passphrase=x", "shutdownGraceSeconds=soon"}, wantErr: "at '/shutdownGraceSeconds': got string, want integer"},
		"schema: cluster name":      {set: []string{"passphrase=x", "clusterName=Prod_1"}, wantErr: "at '/clusterName'"},
		"schema: backend URL":       {set: []string{"passphrase=x", "backendURL=db.example:5432"}, wantErr: "at '/backendURL'"},
		"schema: password in the backend URL": {set: []string{"passphrase=x", "backendURL=postgres://u:hunter2@db:5432/pulumi"},
			wantErr: "at '/backendURL'"},
		"extras": {set: []string{"passphrase=x", "extraArgs[0]=--resync=5m", "extraVolumes[0].name=ca", "extraVolumes[0].configMap.name=ca-bundle",
			"extraVolumeMounts[0].name=ca", "extraVolumeMounts[0].mountPath=/etc/ssl/extra", "shutdownGraceSeconds=40",
			"podAnnotations.team=web", "nodeSelector.disk=ssd", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				d := deployment(t, objs)
				spec := d.Spec.Template.Spec
				c := spec.Containers[0]
				if !slices.Contains(c.Args, "--resync=5m") || !slices.Contains(c.Args, "--shutdown-grace=40s") {
					t.Errorf("args %v, want --resync=5m and --shutdown-grace=40s", c.Args)
				}
				if g := spec.TerminationGracePeriodSeconds; g == nil || *g != 45 {
					t.Errorf("terminationGracePeriodSeconds %v, want 45 (5 s more than the grace)", g)
				}
				if v := volume(d, "ca"); v.ConfigMap == nil || v.ConfigMap.Name != "ca-bundle" {
					t.Errorf("volume ca = %+v", v)
				}
				if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "ca" && m.MountPath == "/etc/ssl/extra" }) {
					t.Errorf("mounts %+v, want ca at /etc/ssl/extra", c.VolumeMounts)
				}
				if d.Spec.Template.Annotations["team"] != "web" || spec.NodeSelector["disk"] != "ssd" || len(spec.Tolerations) != 1 {
					t.Errorf("annotations %v, nodeSelector %v, tolerations %v", d.Spec.Template.Annotations, spec.NodeSelector, spec.Tolerations)
				}
			}},
		// A tenant's LoadBalancer or NodePort, and a rollout of Secrets no policy checked, only
		// behind an explicit opt-in: by default neither flag is passed.
		"tenant guards by default": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, a := range deployment(t, objs).Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--allow-service-types") || strings.HasPrefix(a, "--require-admission-policy") {
					t.Errorf("arg %s rendered by default", a)
				}
			}
		}},
		"tenant guards set": {set: []string{"passphrase=x", "allowServiceTypes={LoadBalancer,NodePort}", "admission.required=true"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args
				for _, want := range []string{"--allow-service-types=LoadBalancer,NodePort", "--require-admission-policy"} {
					if !slices.Contains(args, want) {
						t.Errorf("args %v lack %s", args, want)
					}
				}
			}},
		"schema: service type": {set: []string{"passphrase=x", "allowServiceTypes={External}"}, wantErr: "at '/allowServiceTypes/0': value must be one of 'NodePort', 'LoadBalancer'"},
		"state budget by default": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--state-budget=16Mi") {
				t.Errorf("args %v lack --state-budget=16Mi, the flag's own default", args)
			}
		}},
		"state budget set": {set: []string{"passphrase=x", "stateBudget=4Mi"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--state-budget=4Mi") {
				t.Errorf("args %v lack --state-budget=4Mi", args)
			}
		}},
		"schema: state budget": {set: []string{"passphrase=x", "stateBudget=lots"}, wantErr: "at '/stateBudget'"},
		"metrics Service": {set: []string{"passphrase=x"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			svc := convert[corev1.Service](t, mustFind(t, objs, "Service", operatorName+"-metrics"))
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "metrics" || svc.Spec.Selector["app.kubernetes.io/name"] != "pulumi-operator" {
				t.Errorf("metrics Service %+v", svc.Spec)
			}
			for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
				if o := find(objs, kind, operatorName); o != nil {
					t.Errorf("%s rendered by default (it needs the Prometheus Operator's CRDs)", kind)
				}
			}
		}},
		"ServiceMonitor without the Service": {set: []string{"passphrase=x", "metrics.service.enabled=false", "metrics.serviceMonitor.enabled=true"},
			wantErr: "metrics.serviceMonitor.enabled needs metrics.service.enabled"},
		"monitoring": {set: []string{"passphrase=x", "metrics.serviceMonitor.enabled=true", "metrics.serviceMonitor.labels.release=prom",
			"metrics.prometheusRule.enabled=true", "metrics.grafanaDashboard.enabled=true"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			sm := mustFind(t, objs, "ServiceMonitor", operatorName)
			if sm.GetLabels()["release"] != "prom" {
				t.Errorf("ServiceMonitor labels %v", sm.GetLabels())
			}
			port, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(port) != 1 || port[0].(map[string]any)["port"] != "metrics" {
				t.Errorf("ServiceMonitor endpoints %v", port)
			}
			rule := mustFind(t, objs, "PrometheusRule", operatorName)
			groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
			var alerts []string
			for _, g := range groups {
				rules, _ := g.(map[string]any)["rules"].([]any)
				for _, r := range rules {
					alerts = append(alerts, fmt.Sprint(r.(map[string]any)["alert"]))
				}
			}
			for _, a := range []string{"KindCustomHttpStalled", "KindCustomHttpNotReady", "PulumiOperatorReconcileErrors", "PulumiOperatorLockWaits",
				"PulumiOperatorStackLocked", "PulumiOperatorStateVolumeFilling"} {
				if !slices.Contains(alerts, a) {
					t.Errorf("PrometheusRule alerts %v lack %s", alerts, a)
				}
			}
			cm := convert[corev1.ConfigMap](t, mustFind(t, objs, "ConfigMap", operatorName+"-dashboard"))
			var dash map[string]any
			if err := json.Unmarshal([]byte(cm.Data["pulumi-operator.json"]), &dash); err != nil || dash["title"] != "pulumi-operator" || cm.Labels["grafana_dashboard"] != "1" {
				t.Errorf("dashboard ConfigMap: %v, title %v, labels %v", err, dash["title"], cm.Labels)
			}
		}},
		"secure metrics": {set: []string{"passphrase=x", "metrics.secure=true", "metrics.serviceMonitor.enabled=true"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := deployment(t, objs).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--metrics-secure") {
				t.Errorf("args %v lack --metrics-secure", args)
			}
			auth := convert[rbacv1.ClusterRole](t, mustFind(t, objs, "ClusterRole", operatorName+"-metrics-auth"))
			var granted []string
			for _, r := range auth.Rules {
				granted = append(granted, r.Resources...)
			}
			if !slices.Equal(granted, []string{"tokenreviews", "subjectaccessreviews"}) {
				t.Errorf("metrics-auth grants %v", granted)
			}
			reader := convert[rbacv1.ClusterRole](t, mustFind(t, objs, "ClusterRole", operatorName+"-metrics-reader"))
			if len(reader.Rules) != 1 || !slices.Equal(reader.Rules[0].NonResourceURLs, []string{"/metrics"}) {
				t.Errorf("metrics-reader rules %+v", reader.Rules)
			}
			mustFind(t, objs, "ClusterRoleBinding", operatorName+"-metrics-auth")
			sm := mustFind(t, objs, "ServiceMonitor", operatorName)
			eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "https" || eps[0].(map[string]any)["bearerTokenFile"] == nil {
				t.Errorf("ServiceMonitor endpoints %v, want https with a bearer token", eps)
			}
		}},
		"name overrides": {set: []string{"passphrase=x", "fullnameOverride=ops"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			d := convert[appsv1.Deployment](t, mustFind(t, objs, "Deployment", "ops"))
			if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "ops" {
				t.Errorf("ServiceAccount %q, want ops", sa)
			}
			mustFind(t, objs, "Secret", "ops-secrets")
		}},
		"name override": {set: []string{"passphrase=x", "nameOverride=kch"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			var names []string
			for _, o := range objs {
				if o.GetKind() == "Deployment" {
					names = append(names, o.GetName(), o.GetLabels()["app.kubernetes.io/name"])
				}
			}
			if !slices.Equal(names, []string{operatorName + "-kch", "kch"}) {
				t.Errorf("Deployment name and app.kubernetes.io/name %v, want %s-kch kch", names, operatorName)
			}
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			objs, err := helmTemplate(t, args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("helm template = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, objs)
		})
	}
}

// --- The chart and config/default are the same install -----------------------------------------

// TestChartMatchesKustomize renders both and compares what matters: what every role grants
// (however its rules are split or ordered: config/rbac's ClusterRoles are generated, merged and
// sorted by controller-gen), every binding's role and subjects, and the operator's pod (all but
// its image and the chart's extra default flags). The two can then never drift apart.
func TestChartMatchesKustomize(t *testing.T) {
	kust := kustomize(t, "config/default")
	chart, err := helmTemplate(t, "--set", "passphrase="+testPassword)
	if err != nil {
		t.Fatal(err)
	}

	for _, kind := range []string{"ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"} {
		var kNames, hNames []string
		for _, o := range kust {
			if o.GetKind() == kind {
				kNames = append(kNames, o.GetName())
			}
		}
		for _, o := range chart {
			if o.GetKind() == kind {
				hNames = append(hNames, o.GetName())
			}
		}
		slices.Sort(kNames)
		slices.Sort(hNames)
		if !slices.Equal(kNames, hNames) || len(kNames) == 0 {
			t.Errorf("%ss: kustomize %v, chart %v", kind, kNames, hNames)
			continue
		}
		for _, name := range kNames {
			k, h := find(kust, kind, name), find(chart, kind, name)
			switch kind {
			case "ClusterRole":
				kr, hr := convert[rbacv1.ClusterRole](t, k), convert[rbacv1.ClusterRole](t, h)
				if !slices.Equal(grants(kr.Rules), grants(hr.Rules)) {
					t.Errorf("ClusterRole %s rules differ:\nconfig/rbac:\n%s\nchart:\n%s", name, toYAML(kr.Rules), toYAML(hr.Rules))
				}
			case "Role":
				kr, hr := convert[rbacv1.Role](t, k), convert[rbacv1.Role](t, h)
				if !slices.Equal(grants(kr.Rules), grants(hr.Rules)) || k.GetNamespace() != h.GetNamespace() {
					t.Errorf("Role %s differs:\nconfig/rbac (%s):\n%s\nchart (%s):\n%s", name, k.GetNamespace(), toYAML(kr.Rules), h.GetNamespace(), toYAML(hr.Rules))
				}
			default:
				kb, hb := convert[rbacv1.RoleBinding](t, k), convert[rbacv1.RoleBinding](t, h)
				if !reflect.DeepEqual(kb.RoleRef, hb.RoleRef) || !reflect.DeepEqual(kb.Subjects, hb.Subjects) || k.GetNamespace() != h.GetNamespace() {
					t.Errorf("%s %s differs:\nconfig/rbac:\n%s\nchart:\n%s", kind, name, toYAML(k.Object), toYAML(h.Object))
				}
			}
		}
	}

	kd := convert[appsv1.Deployment](t, mustFind(t, kust, "Deployment", operatorName))
	hd := convert[appsv1.Deployment](t, mustFind(t, chart, "Deployment", operatorName))
	if kd.Namespace != hd.Namespace || kd.Spec.Template.Spec.ServiceAccountName != hd.Spec.Template.Spec.ServiceAccountName {
		t.Errorf("namespace/ServiceAccount: kustomize %s/%s, chart %s/%s", kd.Namespace, kd.Spec.Template.Spec.ServiceAccountName,
			hd.Namespace, hd.Spec.Template.Spec.ServiceAccountName)
	}
	if !reflect.DeepEqual(kd.Spec.Strategy, hd.Spec.Strategy) || !reflect.DeepEqual(kd.Spec.Replicas, hd.Spec.Replicas) {
		t.Errorf("strategy/replicas: kustomize %v/%v, chart %v/%v", kd.Spec.Strategy, *kd.Spec.Replicas, hd.Spec.Strategy, *hd.Spec.Replicas)
	}
	kc, hc := kd.Spec.Template.Spec.Containers[0], hd.Spec.Template.Spec.Containers[0]
	if kc.Image != hc.Image {
		t.Errorf("image: kustomize %s, chart %s", kc.Image, hc.Image)
	}
	for _, a := range kc.Args {
		if !slices.Contains(hc.Args, a) {
			t.Errorf("chart args %v lack kustomize's %s", hc.Args, a)
		}
	}
	// The rest of the pod must be identical.
	kp, hp := kd.Spec.Template.Spec.DeepCopy(), hd.Spec.Template.Spec.DeepCopy()
	kp.Containers[0].Image, hp.Containers[0].Image = "", ""
	kp.Containers[0].Args, hp.Containers[0].Args = nil, nil
	if !reflect.DeepEqual(kp, hp) {
		t.Errorf("pod specs differ (besides image and args):\nconfig/manager:\n%s\nchart:\n%s", toYAML(kp), toYAML(hp))
	}
	kpvc := convert[corev1.PersistentVolumeClaim](t, mustFind(t, kust, "PersistentVolumeClaim", operatorName+"-state"))
	hpvc := convert[corev1.PersistentVolumeClaim](t, mustFind(t, chart, "PersistentVolumeClaim", operatorName+"-state"))
	if !reflect.DeepEqual(kpvc.Spec, hpvc.Spec) {
		t.Errorf("state claims differ:\nconfig/manager:\n%s\nchart:\n%s", toYAML(kpvc.Spec), toYAML(hpvc.Spec))
	}
}

// --- One version string, and versions pinned in several files agree ---------------------------

func chartAppVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, root(chartDir, "Chart.yaml"), &chart)
	return chart.AppVersion
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func readFile(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(root(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// match returns the first submatch of re in s, failing when there is none.
func match(t *testing.T, file, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%s: nothing matches %s", file, re)
	}
	return m[1]
}

func TestVersionsAgree(t *testing.T) {
	// The Go toolchain and the Pulumi release are pinned once each (go.mod's toolchain line,
	// agent/go.mod's pkg/v3) and internal/pins checks every copy; here the rest.
	docker := readFile(t, "Dockerfile")
	goMod := readFile(t, "go.mod")
	controllerGenMod := readFile(t, "hack", "tools", "controller-gen", "go.mod")

	dockerPlugin := match(t, "Dockerfile", docker, `(?m)^ARG KUBERNETES_PLUGIN_VERSION=(\S+)$`)
	checks := []struct{ what, got, want string }{
		{"Dockerfile KUBERNETES_PLUGIN_VERSION vs go.mod github.com/pulumi/pulumi-kubernetes/sdk/v4", dockerPlugin,
			match(t, "go.mod", goMod, `(?m)^\s*github\.com/pulumi/pulumi-kubernetes/sdk/v4 (\S+)`)},
		// controller-gen writes the CRD with the apiextensions types of its own Kubernetes
		// release: the one the operator is built and tested against.
		{"hack/tools/controller-gen/go.mod k8s.io/apiextensions-apiserver minor vs go.mod k8s.io/api minor",
			match(t, "hack/tools/controller-gen/go.mod", controllerGenMod, `(?m)^\s*k8s\.io/apiextensions-apiserver (v0\.\d+)\.`),
			match(t, "go.mod", goMod, `(?m)^\s*k8s\.io/api (v0\.\d+)\.`)},
	}

	// The project's version (version): config/default's image tag, the chart's
	// appVersion and version.
	var kust struct {
		Images []struct {
			Name   string `json:"name"`
			NewTag string `json:"newTag"`
		} `json:"images"`
	}
	readYAML(t, root("config", "default", "kustomization.yaml"), &kust)
	if len(kust.Images) != 1 || kust.Images[0].Name != imageRepo {
		t.Fatalf("config/default/kustomization.yaml images = %+v, want one entry for %s", kust.Images, imageRepo)
	}
	tag := kust.Images[0].NewTag
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, root(chartDir, "Chart.yaml"), &chart)
	checks = append(checks,
		struct{ what, got, want string }{"config/default image tag vs version.Version", tag, version.Version},
		struct{ what, got, want string }{"Chart.yaml appVersion vs version.Version", chart.AppVersion, version.Version},
		struct{ what, got, want string }{"Chart.yaml version vs version.Version", chart.Version, version.Version},
	)

	// The Deployments mount writable directories where the image's environment points.
	pulumiHome := match(t, "Dockerfile", docker, `(?m)^ENV PULUMI_HOME=(\S+)`)
	stateDir := match(t, "Dockerfile", docker, `(?m)^\s*PULUMI_OPERATOR_STATE_DIR=(\S+)$`)
	kd := convert[appsv1.Deployment](t, mustFind(t, kustomize(t, "config/default"), "Deployment", operatorName))
	mounts := map[string]string{}
	for _, m := range kd.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	checks = append(checks,
		struct{ what, got, want string }{"config/manager pulumi-workspaces mount vs Dockerfile PULUMI_HOME/workspaces", mounts["pulumi-workspaces"], pulumiHome + "/workspaces"},
		struct{ what, got, want string }{"config/manager state mount vs Dockerfile PULUMI_OPERATOR_STATE_DIR", mounts["state"], stateDir},
	)

	for _, c := range checks {
		if c.got != c.want || c.got == "" {
			t.Errorf("%s: %q != %q", c.what, c.got, c.want)
		}
	}
}

// --- On the cluster ----------------------------------------------------------------------------

var (
	pvGVR  = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	crbGVR = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}
	crGVR  = schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}
	gvrs   = map[string]schema.GroupVersionResource{
		"ServiceAccount":            {Version: "v1", Resource: "serviceaccounts"},
		"Role":                      {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
		"RoleBinding":               {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
		"ClusterRole":               crGVR,
		"ClusterRoleBinding":        crbGVR,
		"ValidatingAdmissionPolicy": {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"},
		"ValidatingAdmissionPolicyBinding": {Group: "admissionregistration.k8s.io", Version: "v1",
			Resource: "validatingadmissionpolicybindings"},
	}
)

// staticPV creates a PersistentVolume bound in advance to claim ns/name, since the local cluster
// has no storage provisioner; kwok never mounts it.
func staticPV(t *testing.T, c *testenv.Cluster, ns, claim string) {
	t.Helper()
	pv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "PersistentVolume",
		"metadata": map[string]any{"name": ns + "-" + claim},
		"spec": map[string]any{
			"capacity":         map[string]any{"storage": "1Gi"},
			"accessModes":      []any{"ReadWriteOnce"},
			"hostPath":         map[string]any{"path": "/nonexistent/" + ns},
			"storageClassName": "",
			"claimRef":         map[string]any{"namespace": ns, "name": claim},
		},
	}}
	if _, err := c.Client.Resource(pvGVR).Create(context.Background(), pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PersistentVolume: %v", err)
	}
	t.Cleanup(func() {
		_ = c.Client.Resource(pvGVR).Delete(context.Background(), pv.GetName(), metav1.DeleteOptions{})
	})
}

func poll(t *testing.T, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), pollInterval, testTimeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func gone(t *testing.T, c *testenv.Cluster, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	poll(t, fmt.Sprintf("%s %s/%s still exists", gvr.Resource, ns, name), func(ctx context.Context) (bool, error) {
		_, err := c.Client.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

func exists(t *testing.T, c *testenv.Cluster, gvr schema.GroupVersionResource, ns, name string) {
	t.Helper()
	if _, err := c.Client.Resource(gvr).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
		t.Fatalf("get %s %s/%s: %v", gvr.Resource, ns, name, err)
	}
}

// TestHelmInstall packages the chart and installs the archive, upgrades it, uninstalls it, and
// installs it again over what uninstall keeps, in a namespace enforcing the restricted Pod Security Standard. kwok runs
// the pods (no image is pulled), so this proves the apiserver accepts every object and the
// Deployment becomes Available.
func TestHelmInstall(t *testing.T) {
	helmCLI(t)
	c := testenv.Connect(t)
	// Installed first, as every other test does: helm then skips its crds/ (the same file,
	// TestManifestsAreGenerated), and never races another package's test creating it.
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	// As config/manager's namespace: the chart's pod must pass the restricted Pod Security Standard.
	if _, err := c.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	release := "pulumi-operator-" + ns[strings.LastIndex(ns, "-")+1:]
	kc := []string{"--kubeconfig", c.Kubeconfig, "--namespace", ns}
	staticPV(t, c, ns, release+"-state")

	// The first install is of the packaged chart (`helm package`), which must be made without a
	// warning (a symbolic link in the chart draws one); the later ones are of the directory.
	pkgDir := t.TempDir()
	pkg := exec.Command(helmCLI(t), "package", root(chartDir), "--destination", pkgDir)
	pkg.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	out, err := pkg.CombinedOutput()
	archives, _ := filepath.Glob(filepath.Join(pkgDir, "*.tgz"))
	if err != nil || len(archives) != 1 || strings.Contains(strings.ToLower(string(out)), "warning") {
		t.Fatalf("helm package: %v, archives %v, output:\n%s", err, archives, out)
	}
	install := func(chart string) {
		t.Helper()
		if out, err := helm(t, append([]string{"install", release, chart, "--wait", "--timeout", "2m",
			"--set", "passphrase=" + testPassword}, kc...)...); err != nil {
			t.Fatalf("helm install %s: %v\n%s", chart, err, out)
		}
	}
	install(archives[0])
	t.Cleanup(func() { _, _ = helm(t, append([]string{"uninstall", release, "--wait"}, kc...)...) })

	if _, err := c.Client.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1",
		Resource: "customresourcedefinitions"}).Get(ctx, "kindcustomhttps.groupsp.measutosh.dev", metav1.GetOptions{}); err != nil {
		t.Fatalf("CRD after helm install: %v", err)
	}
	dep, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dep.Status.AvailableReplicas != 1 {
		t.Fatalf("Deployment after helm install --wait: %+v", dep.Status)
	}
	pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
		t.Fatalf("operator pods = %v, %v; want one scheduled", pods, err)
	}
	crb, err := c.Kube.RbacV1().ClusterRoleBindings().Get(ctx, release+"-manager", metav1.GetOptions{})
	if err != nil || len(crb.Subjects) != 1 || crb.Subjects[0].Namespace != ns || crb.Subjects[0].Name != release {
		t.Fatalf("ClusterRoleBinding %s-manager = %+v, %v", release, crb, err)
	}

	if out, err := helm(t, append([]string{"upgrade", release, root(chartDir), "--reuse-values", "--set", "workers=3",
		"--wait", "--timeout", "2m"}, kc...)...); err != nil {
		t.Fatalf("helm upgrade: %v\n%s", err, out)
	}
	dep, err = c.Kube.AppsV1().Deployments(ns).Get(ctx, release, metav1.GetOptions{})
	if err != nil || !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--workers=3") || dep.Status.AvailableReplicas != 1 {
		t.Fatalf("Deployment after upgrade: %v, %v", dep, err)
	}

	if out, err := helm(t, append([]string{"uninstall", release, "--wait"}, kc...)...); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	for _, o := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, ns, release},
		{gvrs["ServiceAccount"], ns, release},
		{gvrs["Role"], ns, release + "-leader-election"},
		{gvrs["RoleBinding"], ns, release + "-leader-election"},
		{crGVR, "", release + "-manager"},
		{crGVR, "", release + "-cluster-name"},
		{crbGVR, "", release + "-manager"},
		{crbGVR, "", release + "-cluster-name"},
	} {
		gone(t, c, o.gvr, o.ns, o.name)
	}
	// What holds the stacks and unlocks them stays.
	exists(t, c, schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, ns, release+"-state")
	exists(t, c, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, ns, release+"-secrets")

	// A second install adopts them.
	install(root(chartDir))
	pvc, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, release+"-state", metav1.GetOptions{})
	if err != nil || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("state claim after reinstall: %v, %v", pvc, err)
	}
}

// relocate moves an object of config/ from pulumi-operator-system into namespace ns, and gives
// a cluster-scoped one the namespace as a suffix, so that tests and a real install never share
// a name. Bindings follow: their role's new name, their subjects' namespace.
func relocate(o *unstructured.Unstructured, ns string) {
	if strings.HasPrefix(o.GetKind(), "Cluster") {
		o.SetName(o.GetName() + "-" + ns)
	} else {
		o.SetNamespace(ns)
	}
	if o.GetKind() == "ClusterRoleBinding" {
		ref, _, _ := unstructured.NestedString(o.Object, "roleRef", "name")
		_ = unstructured.SetNestedField(o.Object, ref+"-"+ns, "roleRef", "name")
	}
	if subjects, ok := o.Object["subjects"].([]any); ok {
		for _, s := range subjects {
			s.(map[string]any)["namespace"] = ns
		}
	}
}

// TestKustomizeDeploy applies config/default as `make deploy` does (kubectl apply), moved into a
// namespace of its own (relocate) that enforces the restricted Pod Security Standard as
// config/manager's namespace does; the Deployment must become Available on kwok. Then it deletes
// it as `make undeploy` does (the same kubectl delete selectors), which must leave the state
// claim and the Secret.
func TestKustomizeDeploy(t *testing.T) {
	kubectl := kubectlCLI(t)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()

	var manifests []string
	for _, o := range kustomize(t, "config/default") {
		switch o.GetKind() {
		case "CustomResourceDefinition": // installed above, as every test does
			continue
		case "Namespace": // its labels (Pod Security) go onto the test's namespace
			n, err := c.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range o.GetLabels() {
				n.Labels[k] = v
			}
			if n.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
				t.Errorf("config/manager's namespace does not enforce the restricted Pod Security Standard: %v", o.GetLabels())
			}
			if _, err := c.Kube.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		relocate(o, ns)
		if o.GetNamespace() == "" {
			gvr, name := gvrs[o.GetKind()], o.GetName()
			t.Cleanup(func() { _ = c.Client.Resource(gvr).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
		manifests = append(manifests, toYAML(o.Object))
	}
	all := strings.Join(manifests, "---\n")
	kubectlIn := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	if _, err := c.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName},
		StringData: map[string]string{"passphrase": testPassword}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	staticPV(t, c, ns, operatorName+"-state")
	kubectlIn(all, "apply", "-f", "-")
	poll(t, "the Deployment never became Available", func(ctx context.Context) (bool, error) {
		d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, operatorName, metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 1 && d.Status.ObservedGeneration == d.Generation, nil
	})

	// `make undeploy`.
	kubectlIn(all, "delete", "--ignore-not-found", "--cascade=foreground", "-l", "app.kubernetes.io/component=manager", "-f", "-")
	kubectlIn(all, "delete", "--ignore-not-found", "-l", "app.kubernetes.io/component=rbac", "-f", "-")
	for _, o := range []struct {
		gvr      schema.GroupVersionResource
		ns, name string
	}{
		{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, ns, operatorName},
		{gvrs["ServiceAccount"], ns, operatorName},
		{gvrs["Role"], ns, operatorName + "-leader-election"},
		{crGVR, "", operatorName + "-manager-" + ns},
		{crbGVR, "", operatorName + "-cluster-name-" + ns},
	} {
		gone(t, c, o.gvr, o.ns, o.name)
	}
	exists(t, c, schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}, ns, operatorName+"-state")
	exists(t, c, schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, ns, secretName)
}

// rbacFixture is config/rbac applied for a ServiceAccount in a namespace of its own, with
// clients that authenticate as that ServiceAccount only.
type rbacFixture struct {
	admin   *testenv.Cluster
	opNS    string // the operator's namespace: ServiceAccount, Lease Role
	workNS  string // where KindCustomHttps and their objects live
	config  *rest.Config
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	meta    metadata.Interface
	token   string
	// operatorLog is the log of the operator TestOperatorRunsOnItsRBAC runs, if any.
	operatorLog string
}

// applyRBAC applies config/rbac as the operator's own, in a fresh namespace. Cluster-scoped
// names get the namespace as suffix so that tests and a real install never share them.
func applyRBAC(t *testing.T) *rbacFixture {
	t.Helper()
	c := testenv.Connect(t)
	c.InstallCRD(t)
	f := &rbacFixture{admin: c, opNS: c.Namespace(t)}
	for f.workNS = c.Namespace(t); f.workNS == f.opNS; f.workNS = c.Namespace(t) {
	}
	ctx := context.Background()
	for _, o := range kustomize(t, "config/rbac") {
		gvr, ok := gvrs[o.GetKind()]
		if !ok {
			t.Fatalf("config/rbac has a %s; this test knows %v", o.GetKind(), gvrs)
		}
		relocate(o, f.opNS)
		if _, err := c.Client.Resource(gvr).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if o.GetNamespace() == "" {
			name := o.GetName()
			t.Cleanup(func() { _ = c.Client.Resource(gvr).Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
	}

	tr, err := c.Kube.CoreV1().ServiceAccounts(f.opNS).CreateToken(ctx, operatorName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for ServiceAccount %s/%s: %v", f.opNS, operatorName, err)
	}
	f.token = tr.Status.Token
	// Only the token: the server and how to trust it come from the admin config, its
	// credentials do not.
	f.config = &rest.Config{
		Host:        c.Config.Host,
		BearerToken: f.token,
		TLSClientConfig: rest.TLSClientConfig{
			Insecure: c.Config.Insecure, CAFile: c.Config.CAFile, CAData: c.Config.CAData, ServerName: c.Config.ServerName,
		},
		QPS: 100, Burst: 200,
	}
	if f.kube, err = kubernetes.NewForConfig(f.config); err != nil {
		t.Fatal(err)
	}
	if f.dynamic, err = dynamic.NewForConfig(f.config); err != nil {
		t.Fatal(err)
	}
	if f.meta, err = metadata.NewForConfig(f.config); err != nil {
		t.Fatal(err)
	}
	who, err := f.kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview: %v", err)
	}
	if want := "system:serviceaccount:" + f.opNS + ":" + operatorName; who.Status.UserInfo.Username != want {
		t.Fatalf("the token authenticates as %q, want %q", who.Status.UserInfo.Username, want)
	}
	return f
}

func ptr[T any](v T) *T { return &v }

// access is one SelfSubjectAccessReview question.
type access struct {
	verb, group, resource, sub, ns, name string
}

func (a access) String() string {
	r := a.resource
	if a.group != "" {
		r += "." + a.group
	}
	if a.sub != "" {
		r += "/" + a.sub
	}
	if a.name != "" {
		r += " " + a.name
	}
	ns := a.ns
	if ns == "" {
		ns = "(cluster)"
	}
	return a.verb + " " + r + " in " + ns
}

// TestRBACAllowsWhatTheOperatorDoes asks the apiserver, as the operator's ServiceAccount, about
// every verb the operator and the Pulumi Kubernetes provider use and about a set they must not
// have, then makes some of the calls for real.
func TestRBACAllowsWhatTheOperatorDoes(t *testing.T) {
	f := applyRBAC(t)
	ctx := context.Background()
	const group = "groupsp.measutosh.dev"
	w, o := f.workNS, f.opNS

	var allowed, denied []access
	for _, v := range []string{"get", "list", "watch", "patch"} {
		allowed = append(allowed, access{verb: v, group: group, resource: "kindcustomhttps", ns: w})
	}
	allowed = append(allowed,
		access{verb: "list", group: group, resource: "kindcustomhttps"},
		access{verb: "watch", group: group, resource: "kindcustomhttps"},
		access{verb: "update", group: group, resource: "kindcustomhttps", sub: "status", ns: w},
		access{verb: "create", resource: "events", ns: w},
		access{verb: "patch", resource: "events", ns: w},
		access{verb: "list", group: "apps", resource: "replicasets", ns: w},
		access{verb: "watch", group: "apps", resource: "replicasets", ns: w},
		access{verb: "list", resource: "pods", ns: w},
		access{verb: "watch", resource: "pods", ns: w},
		// The takeover of the original operator's pods and ReplicaSets.
		access{verb: "patch", resource: "pods", ns: w},
		access{verb: "patch", group: "apps", resource: "replicasets", ns: w},
		access{verb: "delete", group: "apps", resource: "replicasets", ns: w},
		access{verb: "list", resource: "persistentvolumeclaims", ns: w},
		access{verb: "watch", resource: "persistentvolumeclaims", ns: w},
		access{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: o},
		access{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: o, name: leaseName},
		access{verb: "update", group: "coordination.k8s.io", resource: "leases", ns: o, name: leaseName},
		access{verb: "get", resource: "namespaces", name: "kube-system"},
		// The look for the admission policy at start.
		access{verb: "list", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicies"},
		access{verb: "list", group: "admissionregistration.k8s.io", resource: "validatingadmissionpolicybindings"},
	)
	for _, r := range []struct{ group, resource string }{{"apps", "deployments"}, {"", "services"}, {"", "configmaps"}} {
		for _, v := range []string{"get", "list", "watch", "create", "patch", "delete"} {
			allowed = append(allowed, access{verb: v, group: r.group, resource: r.resource, ns: w})
		}
		allowed = append(allowed, access{verb: "list", group: r.group, resource: r.resource})
		denied = append(denied,
			access{verb: "update", group: r.group, resource: r.resource, ns: w},
			access{verb: "deletecollection", group: r.group, resource: r.resource, ns: w})
	}
	denied = append(denied,
		access{verb: "create", group: group, resource: "kindcustomhttps", ns: w},
		access{verb: "delete", group: group, resource: "kindcustomhttps", ns: w},
		access{verb: "update", group: group, resource: "kindcustomhttps", ns: w},
		access{verb: "patch", group: group, resource: "kindcustomhttps", sub: "status", ns: w},
		// No Secret at all until a namespace is granted (realRequests grants one).
		access{verb: "get", resource: "secrets", ns: w},
		access{verb: "list", resource: "secrets", ns: w},
		access{verb: "watch", resource: "secrets"},
		access{verb: "list", resource: "secrets"},
		access{verb: "create", resource: "secrets", ns: w},
		access{verb: "update", resource: "secrets", ns: w},
		access{verb: "patch", resource: "secrets", ns: w},
		access{verb: "delete", resource: "secrets", ns: w},
		access{verb: "get", resource: "pods", ns: w},
		access{verb: "create", resource: "pods", ns: w},
		access{verb: "delete", resource: "pods", ns: w},
		access{verb: "create", resource: "pods", sub: "exec", ns: w},
		access{verb: "update", resource: "pods", ns: w},
		access{verb: "create", group: "apps", resource: "replicasets", ns: w},
		access{verb: "create", group: "events.k8s.io", resource: "events", ns: w},
		access{verb: "list", resource: "events", ns: w},
		access{verb: "get", group: "coordination.k8s.io", resource: "leases", ns: o, name: "someone-else"},
		access{verb: "list", group: "coordination.k8s.io", resource: "leases", ns: o},
		access{verb: "delete", group: "coordination.k8s.io", resource: "leases", ns: o, name: leaseName},
		access{verb: "create", group: "coordination.k8s.io", resource: "leases", ns: w},
		access{verb: "get", resource: "namespaces", name: "default"},
		access{verb: "get", resource: "namespaces", name: "kube-public"},
		access{verb: "list", resource: "namespaces"},
		access{verb: "update", resource: "namespaces", name: "kube-system"},
		access{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		access{verb: "create", group: "rbac.authorization.k8s.io", resource: "clusterrolebindings"},
		access{verb: "create", group: "rbac.authorization.k8s.io", resource: "rolebindings", ns: o},
		access{verb: "escalate", group: "rbac.authorization.k8s.io", resource: "clusterroles"},
		access{verb: "create", resource: "serviceaccounts", sub: "token", ns: o, name: operatorName},
		access{verb: "get", resource: "serviceaccounts", ns: o},
		access{verb: "get", group: "apiextensions.k8s.io", resource: "customresourcedefinitions"},
		access{verb: "list", resource: "nodes"},
		access{verb: "impersonate", resource: "users"},
	)
	check := func(a access, want bool) {
		r, err := f.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.sub, Name: a.name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SelfSubjectAccessReview %s: %v", a, err)
		}
		if r.Status.Allowed != want {
			t.Errorf("can %s: %v, want %v", a, r.Status.Allowed, want)
		}
	}
	for _, a := range allowed {
		check(a, true)
	}
	for _, a := range denied {
		check(a, false)
	}

	t.Run("requests", func(t *testing.T) { f.realRequests(t) })
}

// realRequests makes calls the operator makes, with the ServiceAccount's token, and some it must
// never be able to make.
func (f *rbacFixture) realRequests(t *testing.T) {
	ctx := context.Background()
	w := f.workNS
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403 Forbidden", what, err)
		}
	}
	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}

	// The KindCustomHttp side: list and watch everywhere, a patch of the finalizers, status.
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersionResource.GroupVersion().String(), "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "web", "namespace": w},
		"spec":     map[string]any{"port": int64(80), "replicaCount": int64(1)},
	}}
	if _, err := f.admin.Client.Resource(api.GroupVersionResource).Namespace(w).Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create KindCustomHttp as admin: %v", err)
	}
	crs := f.dynamic.Resource(api.GroupVersionResource)
	_, err := crs.List(ctx, metav1.ListOptions{})
	ok("list kindcustomhttps in all namespaces", err)
	watch, err := crs.Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr(int64(5))})
	if ok("watch kindcustomhttps in all namespaces", err); err == nil {
		select {
		case ev := <-watch.ResultChan():
			if ev.Object == nil {
				t.Error("watch kindcustomhttps: no event")
			}
		case <-time.After(10 * time.Second):
			t.Error("watch kindcustomhttps: no event within 10 s")
		}
		watch.Stop()
	}
	got, err := crs.Namespace(w).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get kindcustomhttp: %v", err)
	}
	// The finalizer's write: a merge patch of the finalizers that names the resourceVersion.
	patch := `{"metadata":{"resourceVersion":"` + got.GetResourceVersion() + `","finalizers":["example.com/rbac-test"]}}`
	got, err = crs.Namespace(w).Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	ok("patch kindcustomhttp finalizers", err)
	if err == nil {
		_ = unstructured.SetNestedField(got.Object, int64(1), "status", "observedGeneration")
		_, err = crs.Namespace(w).UpdateStatus(ctx, got, metav1.UpdateOptions{})
		ok("update kindcustomhttp status", err)
		got, err = crs.Namespace(w).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		ok("patch kindcustomhttp finalizers away", err)
	}
	if err == nil {
		got.SetLabels(map[string]string{"touched": "yes"})
		_, err = crs.Namespace(w).Update(ctx, got, metav1.UpdateOptions{})
		forbidden("update kindcustomhttp", err)
	}
	forbidden("delete kindcustomhttp", crs.Namespace(w).Delete(ctx, "web", metav1.DeleteOptions{}))

	// An Event about it, as client-go's recorder writes it.
	_, err = f.kube.CoreV1().Events(w).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "web."},
		InvolvedObject: corev1.ObjectReference{Kind: "KindCustomHttp", APIVersion: cr.GetAPIVersion(), Namespace: w, Name: "web"},
		Reason:         "Test", Message: "rbac test", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "pulumi-operator"},
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	ok("create event", err)

	// The owned objects, the way the provider writes them: server-side apply, read, delete.
	applyCM := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-configmap"},"data":{"a":"b"}}`)
	_, err = f.kube.CoreV1().ConfigMaps(w).Patch(ctx, "web-configmap", types.ApplyPatchType, applyCM,
		metav1.PatchOptions{FieldManager: "pulumi-kubernetes", Force: ptr(true)})
	ok("server-side apply (create) configmap", err)
	cm, err := f.kube.CoreV1().ConfigMaps(w).Get(ctx, "web-configmap", metav1.GetOptions{})
	ok("get configmap", err)
	if err == nil {
		cm.Data["c"] = "d"
		_, err = f.kube.CoreV1().ConfigMaps(w).Update(ctx, cm, metav1.UpdateOptions{})
		forbidden("update (PUT) configmap", err)
	}
	ok("delete configmap", f.kube.CoreV1().ConfigMaps(w).Delete(ctx, "web-configmap", metav1.DeleteOptions{}))
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}}, Selector: map[string]string{"app": "web"}}}
	_, err = f.kube.CoreV1().Services(w).Create(ctx, svc, metav1.CreateOptions{})
	ok("create service", err)
	_, err = f.kube.CoreV1().Services(w).Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
	ok("patch service", err)
	ok("delete service", f.kube.CoreV1().Services(w).Delete(ctx, "web", metav1.DeleteOptions{}))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr(int32(0)),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.invalid/none",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m")}}}}},
		}}}
	_, err = f.kube.AppsV1().Deployments(w).Create(ctx, dep, metav1.CreateOptions{})
	ok("create deployment", err)
	_, err = f.kube.AppsV1().Deployments(w).Get(ctx, "web", metav1.GetOptions{})
	ok("get deployment", err)
	_, err = f.kube.AppsV1().ReplicaSets(w).List(ctx, metav1.ListOptions{})
	ok("list replicasets", err)
	_, err = f.kube.CoreV1().Pods(w).List(ctx, metav1.ListOptions{})
	ok("list pods", err)
	ok("delete deployment", f.kube.AppsV1().Deployments(w).Delete(ctx, "web", metav1.DeleteOptions{}))

	// The Lease, its own only.
	leases := f.kube.CoordinationV1().Leases(f.opNS)
	lease, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: leaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr("test")}}, metav1.CreateOptions{})
	ok("create lease", err)
	if err == nil {
		lease.Spec.HolderIdentity = ptr("test-2")
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		ok("update lease", err)
	}
	_, err = leases.Get(ctx, leaseName, metav1.GetOptions{})
	ok("get lease", err)
	_, err = f.admin.Kube.CoordinationV1().Leases(f.opNS).Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-else"}}, metav1.CreateOptions{})
	ok("create another lease as admin", err)
	_, err = leases.Get(ctx, "someone-else", metav1.GetOptions{})
	forbidden("get another lease", err)

	// The cluster's name, and nothing else about namespaces.
	_, err = f.kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
	ok("get namespace kube-system", err)
	_, err = f.kube.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	forbidden("get namespace default", err)

	// Secrets: none by default; where ClusterRole pulumi-operator-secret-reader is bound, read
	// and list metadata there only; never write one.
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	_, err = f.admin.Kube.CoreV1().Secrets(w).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{})
	ok("create a secret as admin", err)
	_, err = f.kube.CoreV1().Secrets(w).Get(ctx, "s", metav1.GetOptions{})
	forbidden("get secret before a grant", err)
	_, err = f.meta.Resource(secrets).List(ctx, metav1.ListOptions{})
	forbidden("list secret metadata in all namespaces", err)
	f.grantSecrets(t, w)
	poll(t, "the grant of Secrets never took effect", func(ctx context.Context) (bool, error) {
		_, err := f.kube.CoreV1().Secrets(w).Get(ctx, "s", metav1.GetOptions{})
		return err == nil, nil
	})
	_, err = f.meta.Resource(secrets).Namespace(w).List(ctx, metav1.ListOptions{})
	ok("list secret metadata in the granted namespace", err)
	_, err = f.meta.Resource(secrets).List(ctx, metav1.ListOptions{})
	forbidden("list secret metadata in all namespaces after a grant of one", err)
	_, err = f.kube.CoreV1().Secrets(f.opNS).Get(ctx, "anything", metav1.GetOptions{})
	forbidden("get secret in a namespace not granted", err)
	forbidden("delete secret", f.kube.CoreV1().Secrets(w).Delete(ctx, "s", metav1.DeleteOptions{}))
	_, err = f.kube.CoreV1().Secrets(w).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine"}}, metav1.CreateOptions{})
	forbidden("create secret", err)

	// Never RBAC.
	_, err = f.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "evil-" + f.opNS},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	forbidden("create clusterrole", err)
}

// TestOperatorRunsOnItsRBAC runs the real operator binary with nothing but the ServiceAccount's
// token: it must take the Lease, name the cluster, sync its informers, reconcile an object whose
// envFrom names a Secret and a ConfigMap (add the finalizer, read what it may, write status and
// Events, run up: Ready), and on delete destroy the stack and remove the finalizer, all without
// a single "forbidden" in its log. The Kubernetes provider runs on the token too: create, a
// spec change, a repaired hand-made change, destroy. Twice: with the default RBAC (cluster-wide,
// no Secret readable: the object is Ready all the same, and Event EnvSourceNotWatched says a
// change of its Secret will not roll the pods), and as a namespaced install (the manager's role
// bound in the one namespace it watches, where Secrets are granted: a change of the Secret rolls
// the pods). Without the provider plugin the test SKIPs (FAILs under CI=true): PluginMissing
// would prove none of that.
func TestOperatorRunsOnItsRBAC(t *testing.T) {
	cli := testenv.PulumiCLI(t)
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	t.Run("default", func(t *testing.T) { operatorRunsOnItsRBAC(t, cli, false) })
	t.Run("namespaced", func(t *testing.T) { operatorRunsOnItsRBAC(t, cli, true) })
}

func operatorRunsOnItsRBAC(t *testing.T, cli string, namespaced bool) {
	f := applyRBAC(t)
	ctx := context.Background()
	var scope []string
	if namespaced {
		// What the chart makes with watchNamespace and envFromSecrets.namespaces: the
		// manager's ClusterRole bound in the watched namespace only, Secrets granted there.
		crb := "pulumi-operator-manager-" + f.opNS
		if err := f.admin.Kube.RbacV1().ClusterRoleBindings().Delete(ctx, crb, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete ClusterRoleBinding %s: %v", crb, err)
		}
		if _, err := f.admin.Kube.RbacV1().RoleBindings(f.workNS).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "pulumi-operator-manager"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: crb},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: operatorName, Namespace: f.opNS}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.grantSecrets(t, f.workNS)
		scope = []string{"--namespace", f.workNS, "--secret-namespaces", f.workNS}
		// Cluster-wide reads are gone; those of the namespace remain.
		for _, a := range []struct {
			attrs authorizationv1.ResourceAttributes
			want  bool
		}{
			{authorizationv1.ResourceAttributes{Verb: "list", Group: api.GroupVersionResource.Group, Resource: "kindcustomhttps"}, false},
			{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: f.opNS}, false},
			{authorizationv1.ResourceAttributes{Verb: "list", Resource: "configmaps", Namespace: f.opNS}, false},
			{authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: f.workNS}, true},
			{authorizationv1.ResourceAttributes{Verb: "watch", Group: api.GroupVersionResource.Group, Resource: "kindcustomhttps", Namespace: f.workNS}, true},
		} {
			attrs := a.attrs
			poll(t, fmt.Sprintf("namespaced RBAC: %s %s in %q never became allowed=%v", attrs.Verb, attrs.Resource, attrs.Namespace, a.want),
				func(ctx context.Context) (bool, error) {
					r, err := f.kube.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
						Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
					return err == nil && r.Status.Allowed == a.want, err
				})
		}
	}
	dir := t.TempDir()

	bin := filepath.Join(dir, "pulumi-operator")
	if out, err := run(t, nil, "go", "build", "-o", bin, "."); err != nil {
		t.Fatalf("build the operator: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	f.writeKubeconfig(t, kubeconfig)
	health := testenv.FreeAddr(t)
	selector := "pulumi-operator.test/shard=" + f.opNS

	logPath := filepath.Join(dir, "operator.log")
	f.operatorLog = logPath
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig, "--state-dir", filepath.Join(dir, "state"), "--pulumi", cli,
		"watch", "--leader-elect", "--label-selector", selector, "--workers", "1",
		"--health-addr", health, "--metrics-addr=", "--shutdown-grace", "10s"}, scope...)...)
	cmd.Dir = dir // no Pulumi.yaml: project kindcustomhttp, file backend in the state dir
	cmd.Env = append(withoutEnv(os.Environ(), "KUBECONFIG", "PULUMI_BACKEND_URL", "WATCH_NAMESPACE", "PULUMI_OPERATOR_"),
		"PULUMI_CONFIG_PASSPHRASE="+testPassword, "POD_NAMESPACE="+f.opNS)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return errors.New("did not stop within 30 s of SIGTERM")
		}
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = stop()
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("operator log:\n%s", b)
		}
	})

	// It takes the Lease in its namespace.
	poll(t, "the operator never took the Lease", func(ctx context.Context) (bool, error) {
		l, err := f.admin.Kube.CoordinationV1().Leases(f.opNS).Get(ctx, leaseName, metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})

	// spec.envFrom names a Secret and a ConfigMap: the operator reads both.
	if _, err := f.admin.Kube.CoreV1().Secrets(f.workNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-env"},
		StringData: map[string]string{"TOKEN": "t"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.Kube.CoreV1().ConfigMaps(f.workNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-settings"},
		Data: map[string]string{"MODE": "m"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	crs := f.admin.Client.Resource(api.GroupVersionResource).Namespace(f.workNS)
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersionResource.GroupVersion().String(), "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "web", "namespace": f.workNS,
			"labels": map[string]any{"pulumi-operator.test/shard": f.opNS}},
		"spec": map[string]any{"port": int64(80), "replicaCount": int64(1), "envFrom": []any{
			map[string]any{"secretRef": map[string]any{"name": "web-env"}},
			map[string]any{"configMapRef": map[string]any{"name": "web-settings"}},
		}},
	}}
	if _, err := crs.Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create KindCustomHttp: %v", err)
	}
	t.Cleanup(func() {
		// If the operator could not finish, let the namespace go anyway.
		_, _ = crs.Patch(context.Background(), "web", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})

	f.waitSettled(t, crs, 1)
	deps := f.admin.Kube.AppsV1().Deployments(f.workNS)
	envDigest := func() string {
		d, err := deps.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return d.Spec.Template.Annotations[infra.EnvDigestAnnotation]
	}
	notWatched := func() string {
		evs, _ := f.admin.Kube.CoreV1().Events(f.workNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web,reason=" + api.ReasonEnvSourceNotWatched})
		if evs == nil || len(evs.Items) == 0 {
			return ""
		}
		return evs.Items[0].Message
	}
	if namespaced {
		// The Secret is read: a change of its data rolls the pods.
		before := envDigest()
		if _, err := f.admin.Kube.CoreV1().Secrets(f.workNS).Patch(ctx, "web-env", types.MergePatchType,
			[]byte(`{"stringData":{"TOKEN":"rotated"}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		poll(t, "a change of the granted Secret never rolled the pods", func(context.Context) (bool, error) {
			d := envDigest()
			return d != "" && d != before, nil
		})
		if m := notWatched(); m != "" {
			t.Errorf("Event EnvSourceNotWatched although the Secret is granted: %s", m)
		}
	} else {
		// No Secret may be read: Ready all the same, and the user is told what that costs.
		poll(t, "no Event EnvSourceNotWatched naming Secret web-env", func(context.Context) (bool, error) {
			m := notWatched()
			return strings.Contains(m, "Secret "+f.workNS+"/web-env") && strings.Contains(m, "does not roll the pods"), nil
		})
	}
	// A spec change (an update through server-side apply and the Deployment await) and a
	// change by hand (drift: live reads, refresh, repair).
	if d, err := deps.Get(ctx, "web", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 1 {
		t.Fatalf("Deployment after the create: %v, %v", d, err)
	}
	if _, err := crs.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicaCount":2}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitSettled(t, crs, 2)
	if d, err := deps.Get(ctx, "web", metav1.GetOptions{}); err != nil || *d.Spec.Replicas != 2 {
		t.Fatalf("Deployment after the spec change: %v, %v", d, err)
	}
	if _, err := deps.Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the hand-made change was never repaired", func(ctx context.Context) (bool, error) {
		d, err := deps.Get(ctx, "web", metav1.GetOptions{})
		return err == nil && *d.Spec.Replicas == 2, nil
	})
	poll(t, "no Event from the operator", func(ctx context.Context) (bool, error) {
		evs, err := f.admin.Kube.CoreV1().Events(f.workNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=web"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Source.Component == "pulumi-operator" {
				return true, nil
			}
		}
		return false, nil
	})
	if code := httpStatus(health + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d while leading with synced caches, want 200", code)
	}

	if err := crs.Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "the object was never deleted (destroy, then finalizer removal)", func(ctx context.Context) (bool, error) {
		_, err := crs.Get(ctx, "web", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})

	stopped = true
	if err := stop(); err != nil {
		t.Errorf("operator exit: %v", err)
	}
	if line := f.refused(); line != "" {
		t.Errorf("the operator was refused something:\n%s", line)
	}
}

// grantSecrets binds ClusterRole pulumi-operator-secret-reader (config/rbac) to the operator's
// ServiceAccount in namespace ns, as its comment tells an administrator to.
func (f *rbacFixture) grantSecrets(t *testing.T, ns string) {
	t.Helper()
	if _, err := f.admin.Kube.RbacV1().RoleBindings(ns).Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pulumi-operator-secret-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "pulumi-operator-secret-reader-" + f.opNS},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: operatorName, Namespace: f.opNS}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("grant Secrets of %s: %v", ns, err)
	}
}

// refused returns the first line of the operator's log that says the apiserver refused it
// something, or "".
func (f *rbacFixture) refused() string {
	log, _ := os.ReadFile(f.operatorLog)
	if i := bytes.Index(bytes.ToLower(log), []byte("forbidden")); i >= 0 {
		return lineAt(log, i)
	}
	return ""
}

// waitSettled waits until the operator has handled generation gen of the KindCustomHttp: the
// finalizer is on and Ready is True. An up that failed (a refused request, a missing plugin)
// fails the test at once with the condition's message.
func (f *rbacFixture) waitSettled(t *testing.T, crs dynamic.ResourceInterface, gen int64) {
	t.Helper()
	poll(t, fmt.Sprintf("generation %d never became Ready", gen), func(ctx context.Context) (bool, error) {
		if line := f.refused(); line != "" {
			return false, fmt.Errorf("the operator was refused something: %s", line)
		}
		u, err := crs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil || !slices.Contains(u.GetFinalizers(), watcher.Finalizer) {
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] != api.ConditionReady || m["observedGeneration"] != gen {
				continue
			}
			switch m["reason"] {
			case api.ReasonSucceeded:
				return m["status"] == "True", nil
			case api.ReasonUpdateFailed, api.ReasonPluginMissing:
				return false, fmt.Errorf("up failed (%v): %v", m["reason"], m["message"])
			}
		}
		return false, nil
	})
}

func (f *rbacFixture) writeKubeconfig(t *testing.T, path string) {
	t.Helper()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = f.config.Host
	cluster.CertificateAuthorityData = f.config.CAData
	cluster.CertificateAuthority = f.config.CAFile
	cluster.InsecureSkipTLSVerify = f.config.Insecure
	cluster.TLSServerName = f.config.ServerName
	user := clientcmdapi.NewAuthInfo()
	user.Token = f.token
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = cluster
	kc.AuthInfos["operator"] = user
	kc.Contexts["operator"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "operator", Namespace: f.opNS}
	kc.CurrentContext = "operator"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
}

func withoutEnv(env []string, prefixes ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				return true
			}
		}
		return false
	})
}

func httpStatus(url string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func lineAt(b []byte, i int) string {
	start := bytes.LastIndexByte(b[:i], '\n') + 1
	end := bytes.IndexByte(b[i:], '\n')
	if end < 0 {
		return string(b[start:])
	}
	return string(b[start : i+end])
}

// What `kubectl get kch` shows, as the real API server serves it (the Table a kubectl get
// asks for): Message (the Ready condition's) and Stack only at -o wide (priority 1), and
// the category pulumi, so `kubectl get pulumi` lists the objects.
func TestCRDPrinterColumns(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	gvr := schema.GroupVersionResource{Group: "groupsp.measutosh.dev", Version: "v1", Resource: "kindcustomhttps"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "groupsp.measutosh.dev/v1", "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": "columns"},
		"spec":     map[string]any{"replicaCount": int64(1), "port": int64(80)},
	}}
	got, err := c.Client.Resource(gvr).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Object["status"] = map[string]any{
		"stack": "organization/kindcustomhttp/c." + ns + ".columns",
		"conditions": []any{map[string]any{"type": "Ready", "status": "False", "reason": "UpFailed",
			"message": "up failed: quota exceeded", "lastTransitionTime": "2026-01-01T00:00:00Z"}},
	}
	if _, err := c.Client.Resource(gvr).Namespace(ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(c.Config)
	rc.GroupVersion = &schema.GroupVersion{Group: gvr.Group, Version: gvr.Version}
	rc.APIPath = "/apis"
	rc.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		t.Fatal(err)
	}
	body, err := client.Get().Namespace(ns).Resource(gvr.Resource).Name("columns").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil || len(table.Rows) != 1 {
		t.Fatalf("Table: %v, %s", err, body)
	}
	cells := map[string]any{}
	priority := map[string]int32{}
	for i, col := range table.ColumnDefinitions {
		cells[col.Name], priority[col.Name] = table.Rows[0].Cells[i], col.Priority
	}
	for name, want := range map[string]string{"Ready": "False", "Reason": "UpFailed",
		"Message": "up failed: quota exceeded", "Stack": "organization/kindcustomhttp/c." + ns + ".columns"} {
		if cells[name] != want {
			t.Errorf("column %s = %v, want %q (all: %v)", name, cells[name], want, cells)
		}
	}
	if priority["Message"] != 1 || priority["Stack"] != 1 || priority["Ready"] != 0 {
		t.Errorf("priorities %v: want Message and Stack at 1 (-o wide only), Ready at 0", priority)
	}
	resources, err := c.Kube.Discovery().ServerResourcesForGroupVersion("groupsp.measutosh.dev/v1")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resources.APIResources {
		if r.Name == "kindcustomhttps" && !slices.Contains(r.Categories, "pulumi") {
			t.Errorf("categories %v, want pulumi (kubectl get pulumi)", r.Categories)
		}
	}
}

// The operator binary accepts the command line the chart and config/ give it: a flag in the
// wrong place (a global flag after `watch`) makes the pod exit at start, leaving every object
// alone. Each rendered command runs with --help added, which parses every flag first.
func TestManifestArgsParse(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pulumi-operator")
	if out, err := run(t, nil, "go", "build", "-o", bin, "."); err != nil {
		t.Fatalf("build the operator: %v\n%s", err, out)
	}
	chart, err := helmTemplate(t, "--set", "passphrase=x", "--set", "metrics.secure=true", "--set", "watchNamespace=a", "--set", "labelSelector=shard=1",
		"--set", "allowServiceTypes={LoadBalancer,NodePort}", "--set", "admission.required=true")
	if err != nil {
		t.Fatal(err)
	}
	for src, objs := range map[string][]*unstructured.Unstructured{"chart": chart, "config/default": kustomize(t, "config/default")} {
		for _, o := range objs {
			if o.GetKind() != "Deployment" {
				continue
			}
			dep := convert[appsv1.Deployment](t, o)
			c := dep.Spec.Template.Spec.Containers[0]
			args := append(slices.Clone(c.Args), "--help")
			if out, err := run(t, nil, bin, args...); err != nil {
				t.Errorf("%s: pulumi-operator %v: %v\n%s", src, c.Args, err, out)
			}
		}
	}
}

// TestChartReadmeNamespace: the chart README's install makes the namespace with the Pod Security
// label that config/manager's namespace carries (helm's --create-namespace makes one without),
// and so does the repository README's.
func TestChartReadmeNamespace(t *testing.T) {
	ns, err := os.ReadFile(root("config/manager/namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const label = "pod-security.kubernetes.io/enforce"
	var value string
	for _, line := range strings.Split(string(ns), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == label {
			value = strings.TrimSpace(v)
		}
	}
	if value == "" {
		t.Fatalf("config/manager/namespace.yaml has no %s label", label)
	}
	for file, namespace := range map[string]string{filepath.Join(chartDir, "README.md"): "pulumi-operator", "README.md": "pulumi-operator-system"} {
		b, err := os.ReadFile(root(file))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range []string{"kubectl create namespace " + namespace + "\n",
			"kubectl label namespace " + namespace + " " + label + "=" + value + "\n"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the install lacks %q", file, want)
			}
		}
		if strings.Contains(text, "--create-namespace") {
			t.Errorf("%s: an install with --create-namespace makes a namespace without the %s label", file, label)
		}
	}
}
