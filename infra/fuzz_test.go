package infra

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	ktypes "k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// fuzzSpec builds a KindCustomHttp from the fuzzer's values. data holds configMapData as
// key, value, key, value... separated by NUL bytes (a key with no value gets ""), so one
// string reaches every shape of the map, newlines in values included. envFrom, when not empty,
// names one ConfigMap (or Secret when envSecret) with prefix envPrefix.
//
// Every string is made valid UTF-8 as json.Marshal makes it (invalid bytes become U+FFFD):
// every KindCustomHttp the project handles went through FromUnstructured, which marshals it to
// JSON, and Pulumi refuses properties that are not UTF-8.
func fuzzSpec(name, namespace string, replicas, port, containerPort int32, image, serviceType, data string,
	rollout bool, envFrom, envPrefix string, envSecret bool, uid string,
) *api.KindCustomHttp {
	for _, s := range []*string{&name, &namespace, &image, &serviceType, &data, &envFrom, &envPrefix, &uid} {
		*s = strings.ToValidUTF8(*s, "\uFFFD")
	}
	o := &api.KindCustomHttp{Spec: api.KindCustomHttpSpec{
		ReplicaCount: &replicas, Port: &port, Image: image, ServiceType: api.ServiceType(serviceType),
		RolloutOnConfigChange: &rollout,
	}}
	o.Name, o.Namespace, o.UID = name, namespace, ktypes.UID(uid)
	// 0 stands for an absent containerPort, so the default is fuzzed too.
	if containerPort != 0 {
		o.Spec.ContainerPort = &containerPort
	}
	if data != "" {
		o.Spec.ConfigMapData = map[string]string{}
		parts := strings.Split(data, "\x00")
		for i := 0; i < len(parts); i += 2 {
			v := ""
			if i+1 < len(parts) {
				v = parts[i+1]
			}
			o.Spec.ConfigMapData[parts[i]] = v
		}
	}
	if envFrom != "" {
		ref := &api.LocalObject{Name: envFrom}
		src := api.EnvFromSource{Prefix: envPrefix, ConfigMapRef: ref}
		if envSecret {
			src = api.EnvFromSource{Prefix: envPrefix, SecretRef: ref}
		}
		o.Spec.EnvFrom = []api.EnvFromSource{src}
	}
	return o
}

// dryRun makes a mocked run a preview, as `pulumi preview` runs the program.
func dryRun(info *pulumi.RunInfo) { info.DryRun = true }

// FuzzProgram feeds random specs through api/v1's Validate and Resolve and runs the program of
// every valid one with Pulumi's mocks, as a preview and as an up: nothing may panic, Resolve
// must refuse exactly what Validate finds wrong, and the declared objects must be what the spec
// asks for (names, replicas, ports, image, Service type, ConfigMap data, owner) and what Build
// returns for it, field for field, and what the SDK's typed constructors send the engine. The seeds
// below and the corpus in testdata/fuzz/FuzzProgram run with every `go test`; run more with
// `go test -run '^$' -fuzz=FuzzProgram -fuzztime=30s ./infra/`.
func FuzzProgram(f *testing.F) {
	type seed struct {
		name, namespace               string
		replicas, port, containerPort int32
		image, serviceType, data      string
		rollout                       bool
		envFrom, envPrefix            string
		envSecret                     bool
		uid                           string
	}
	for _, s := range []seed{
		// The original operator's sample.
		{"kindcustomhttp-sample", "peerns", 2, 80, 0, "", "", "hostports\x00localhost,8080\n", true, "", "", false, ""},
		// Every optional field, at the upper bounds.
		{"web", "team-a", api.MaxReplicaCount, api.MaxPort, api.MaxPort, "example.com/srv:v2", "Headless",
			"hostports\x00a,1\nb,2\n\x00extra.txt\x00", false, "settings", "APP_", false, "0f1e2d3c-uid"},
		// The lower bounds.
		{"a", "b", 0, 1, 1, strings.Repeat("i", api.MaxImageLength), "NodePort", "", true, "creds", "", true, ""},
		{"lb", "b", 1, 443, 8443, "", "LoadBalancer", "k", true, "", "", false, "uid"},
		// One past each bound, and bad values of every other field.
		{"web", "team-a", api.MaxReplicaCount + 1, api.MaxPort + 1, -1, strings.Repeat("i", api.MaxImageLength+1), "External",
			"../x\x00y", true, "Bad_Name", "1x", false, ""},
		{"Web.v2", "", -1, 0, 0, "nginx latest", "", "\x00", true, "", "", false, ""},
	} {
		f.Add(s.name, s.namespace, s.replicas, s.port, s.containerPort, s.image, s.serviceType, s.data,
			s.rollout, s.envFrom, s.envPrefix, s.envSecret, s.uid)
	}
	f.Fuzz(func(t *testing.T, name, namespace string, replicas, port, containerPort int32, image, serviceType, data string,
		rollout bool, envFrom, envPrefix string, envSecret bool, uid string,
	) {
		obj := fuzzSpec(name, namespace, replicas, port, containerPort, image, serviceType, data,
			rollout, envFrom, envPrefix, envSecret, uid)
		problems := api.Validate(obj)
		d, err := api.Resolve(obj)
		if err != nil {
			var ise *api.InvalidSpecError
			if !errors.As(err, &ise) || len(ise.Errors) == 0 || len(problems) == 0 {
				t.Fatalf("Resolve error %v: want an InvalidSpecError listing what Validate found (%v)", err, problems)
			}
			return
		}
		if len(problems) > 0 {
			t.Fatalf("Resolve accepted a spec Validate refuses: %v", problems)
		}
		if d.ReplicaCount != replicas || d.Port != port ||
			(containerPort != 0 && d.ContainerPort != containerPort) || (containerPort == 0 && d.ContainerPort != api.DefaultContainerPort) {
			t.Fatalf("Resolve changed numbers of the spec: replicas %d port %d containerPort %d from %d %d %d",
				d.ReplicaCount, d.Port, d.ContainerPort, replicas, port, containerPort)
		}
		if d.ReplicaCount < 0 || d.ReplicaCount > api.MaxReplicaCount || d.Port < 1 || d.Port > api.MaxPort ||
			d.ContainerPort < 1 || d.ContainerPort > api.MaxPort || len(d.ConfigMapData) > api.MaxConfigMapDataKeys ||
			utf8.RuneCountInString(d.Image) > api.MaxImageLength {
			t.Fatalf("Resolve accepted a value past a bound: replicas %d port %d containerPort %d, %d keys, image of %d characters",
				d.ReplicaCount, d.Port, d.ContainerPort, len(d.ConfigMapData), utf8.RuneCountInString(d.Image))
		}
		for _, preview := range []bool{true, false} {
			m := &mocks{resources: map[string]map[string]any{}, names: map[string]string{}}
			opts := []pulumi.RunOption{pulumi.WithMocks("kindcustomhttp", "test", m)}
			if preview {
				opts = append(opts, dryRun)
			}
			if err := pulumi.RunErr(Program(d), opts...); err != nil {
				t.Fatalf("program (preview %v) of a valid spec failed: %v", preview, err)
			}
			checkDeclared(t, d, m)
			checkBuild(t, d, m.resources)
		}
	})
}

// checkDeclared asserts the invariants of what the program declared for d.
func checkDeclared(t *testing.T, d api.Desired, m *mocks) {
	t.Helper()
	cm := m.resources["kubernetes:core/v1:ConfigMap"]
	dep := m.resources["kubernetes:apps/v1:Deployment"]
	svc := m.resources["kubernetes:core/v1:Service"]
	if cm == nil || dep == nil || svc == nil || len(m.resources) != 3 {
		t.Fatalf("want exactly a ConfigMap, a Deployment and a Service, got %v", m.names)
	}
	for r, want := range map[string]string{"ConfigMap": d.ConfigMapName(), "Deployment": d.Name, "Service": d.Name} {
		obj := map[string]map[string]any{"ConfigMap": cm, "Deployment": dep, "Service": svc}[r]
		if get(t, obj, "metadata", "name") != want || get(t, obj, "metadata", "namespace") != d.Namespace {
			t.Errorf("%s is %v/%v, want %s/%s", r, get(t, obj, "metadata", "namespace"), get(t, obj, "metadata", "name"), d.Namespace, want)
		}
		owners, _ := get(t, obj, "metadata").(map[string]any)["ownerReferences"].([]any)
		if (d.OwnerUID != "") != (len(owners) == 1) || (len(owners) == 1 && get(t, owners[0], "uid") != d.OwnerUID) {
			t.Errorf("%s ownerReferences = %v, want one to uid %q (none without a uid)", r, owners, d.OwnerUID)
		}
	}
	data, _ := cm["data"].(map[string]any)
	if len(data) != len(d.ConfigMapData) {
		t.Errorf("ConfigMap data has %d keys, want %d", len(data), len(d.ConfigMapData))
	}
	for k, v := range d.ConfigMapData {
		if data[k] != v {
			t.Errorf("ConfigMap data[%q] = %q, want %q", k, data[k], v)
		}
	}
	if got := get(t, dep, "spec", "replicas"); got != float64(d.ReplicaCount) {
		t.Errorf("Deployment replicas = %v, want %d", got, d.ReplicaCount)
	}
	c := get(t, dep, "spec", "template", "spec", "containers", 0)
	if get(t, c, "image") != d.Image || get(t, c, "ports", 0, "containerPort") != float64(d.ContainerPort) {
		t.Errorf("container image %v port %v, want %s %d", get(t, c, "image"), get(t, c, "ports", 0, "containerPort"), d.Image, d.ContainerPort)
	}
	if envFrom, _ := c.(map[string]any)["envFrom"].([]any); len(envFrom) != len(d.EnvFrom) {
		t.Errorf("container envFrom = %v, want %d sources", envFrom, len(d.EnvFrom))
	}
	annotations, _ := get(t, dep, "spec", "template", "metadata").(map[string]any)["annotations"].(map[string]any)
	if digest, ok := annotations[ConfigDigestAnnotation]; ok != d.RolloutOnConfigChange || (ok && digest != d.ConfigDigest()) {
		t.Errorf("pod template annotations %v, want the config digest only when rolloutOnConfigChange", annotations)
	}
	if get(t, svc, "spec", "ports", 0, "port") != float64(d.Port) {
		t.Errorf("Service port = %v, want %d", get(t, svc, "spec", "ports", 0, "port"), d.Port)
	}
	wantType, wantIP := string(d.ServiceType), any(nil)
	if d.ServiceType == api.ServiceTypeHeadless {
		wantType, wantIP = string(api.ServiceTypeClusterIP), "None"
	}
	if get(t, svc, "spec", "type") != wantType || svc["spec"].(map[string]any)["clusterIP"] != wantIP {
		t.Errorf("Service type %v clusterIP %v, want %s %v", get(t, svc, "spec", "type"), svc["spec"].(map[string]any)["clusterIP"], wantType, wantIP)
	}
}
