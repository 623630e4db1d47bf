package infra

import (
	"reflect"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// mocks records every resource the program declares and answers like the apiserver would
// (inputs echoed, a cluster IP for a non-headless Service).
type mocks struct {
	mu        sync.Mutex
	resources map[string]map[string]any // by resource type token
	names     map[string]string         // logical name by type token
}

func (m *mocks) NewResource(args pulumi.MockResourceArgs) (string, resource.PropertyMap, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.resources[args.TypeToken] = args.Inputs.Mappable()
	m.names[args.TypeToken] = args.Name
	out := args.Inputs.Copy()
	if args.TypeToken == "kubernetes:core/v1:Service" {
		spec := out["spec"].ObjectValue()
		if _, ok := spec["clusterIP"]; !ok {
			spec["clusterIP"] = resource.NewStringProperty("10.96.0.10")
		}
	}
	return args.Name + "-id", out, nil
}

func (m *mocks) Call(args pulumi.MockCallArgs) (resource.PropertyMap, error) {
	return args.Args, nil
}

func run(t *testing.T, d api.Desired) *mocks {
	t.Helper()
	m := &mocks{resources: map[string]map[string]any{}, names: map[string]string{}}
	if err := pulumi.RunErr(Program(d), pulumi.WithMocks("kindcustomhttp", "test", m)); err != nil {
		t.Fatalf("program failed: %v", err)
	}
	return m
}

// get walks a decoded property map: get(m, "spec", "template", "spec").
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mv, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %q: %T is not an object", k, v)
			}
			v = mv[k]
		case int:
			av, ok := v.([]any)
			if !ok || len(av) <= k {
				t.Fatalf("at [%d]: %v is not an array that long", k, v)
			}
			v = av[k]
		}
	}
	return v
}

func TestProgram(t *testing.T) {
	base := api.Desired{Namespace: "peerns", Name: "kindcustomhttp-sample", ReplicaCount: 2, Port: 80,
		ContainerPort: 8080, Image: api.DefaultImage, ServiceType: api.ServiceTypeClusterIP,
		ConfigMapData: map[string]string{"hostports": "localhost,8080\n"}, RolloutOnConfigChange: true}
	tests := map[string]struct {
		mutate        func(*api.Desired)
		replicas      float64
		port          float64
		containerPort float64
		serviceType   string
		clusterIP     any
		image         string
		// args are the container's: the default image's server gets its settings as flags (it
		// reads none from the environment, which envFrom fills); another image its own.
		args any
	}{
		"sample defaults": {func(*api.Desired) {}, 2, 80, 8080, "ClusterIP", nil, api.DefaultImage,
			[]any{"--listen=:8080", "--config=/config/hostports"}},
		"headless, own image and port": {func(d *api.Desired) {
			d.ServiceType, d.Image, d.ContainerPort, d.Port = api.ServiceTypeHeadless, "example.com/srv:v2", 9000, 8443
		}, 2, 8443, 9000, "ClusterIP", "None", "example.com/srv:v2", nil},
		"zero replicas, NodePort, own port": {func(d *api.Desired) {
			d.ReplicaCount, d.ServiceType, d.ContainerPort = 0, api.ServiceTypeNodePort, 9090
		}, 0, 80, 9090, "NodePort", nil, api.DefaultImage, []any{"--listen=:9090", "--config=/config/hostports"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := base
			tc.mutate(&d)
			m := run(t, d)
			cm := m.resources["kubernetes:core/v1:ConfigMap"]
			dep := m.resources["kubernetes:apps/v1:Deployment"]
			svc := m.resources["kubernetes:core/v1:Service"]
			if cm == nil || dep == nil || svc == nil || len(m.resources) != 3 {
				t.Fatalf("want exactly a ConfigMap, a Deployment and a Service, got %v", m.names)
			}
			for typ, want := range map[string]string{
				"kubernetes:core/v1:ConfigMap":  d.Name + "-configmap",
				"kubernetes:apps/v1:Deployment": d.Name,
				"kubernetes:core/v1:Service":    d.Name,
			} {
				r := m.resources[typ]
				if got := get(t, r, "metadata", "name"); got != want {
					t.Errorf("%s name = %v, want %s", typ, got, want)
				}
				if got := get(t, r, "metadata", "namespace"); got != d.Namespace {
					t.Errorf("%s namespace = %v, want %s", typ, got, d.Namespace)
				}
				for k, v := range Labels(d) {
					if got := get(t, r, "metadata", "labels", k); got != v {
						t.Errorf("%s label %s = %v, want %s", typ, k, got, v)
					}
				}
			}
			if got := get(t, cm, "data", "hostports"); got != "localhost,8080\n" {
				t.Errorf("ConfigMap data hostports = %v", got)
			}
			if got := get(t, dep, "spec", "replicas"); got != tc.replicas {
				t.Errorf("replicas = %v, want %v", got, tc.replicas)
			}
			sel := get(t, dep, "spec", "selector", "matchLabels").(map[string]any)
			if sel[LabelInstance] != d.Name || sel[LabelName] != AppName || len(sel) != 2 {
				t.Errorf("selector = %v: must select by name and instance only", sel)
			}
			tmplLabels := get(t, dep, "spec", "template", "metadata", "labels").(map[string]any)
			for k, v := range sel {
				if tmplLabels[k] != v {
					t.Errorf("pod template label %s = %v, selector wants %v", k, tmplLabels[k], v)
				}
			}
			c := get(t, dep, "spec", "template", "spec", "containers", 0)
			if get(t, c, "image") != tc.image || get(t, c, "name") != ContainerName {
				t.Errorf("container = %v", c)
			}
			if got := c.(map[string]any)["args"]; !reflect.DeepEqual(got, tc.args) {
				t.Errorf("container args = %#v, want %#v", got, tc.args)
			}
			if get(t, c, "ports", 0, "containerPort") != tc.containerPort || get(t, c, "ports", 0, "name") != PortName {
				t.Errorf("container port = %v, want %v named %s", get(t, c, "ports"), tc.containerPort, PortName)
			}
			if get(t, c, "volumeMounts", 0, "mountPath") != "/config" || get(t, c, "volumeMounts", 0, "name") != VolumeName {
				t.Errorf("volume mount = %v", get(t, c, "volumeMounts"))
			}
			vol := get(t, dep, "spec", "template", "spec", "volumes", 0)
			if get(t, vol, "name") != VolumeName || get(t, vol, "configMap", "name") != d.Name+"-configmap" {
				t.Errorf("volume = %v", vol)
			}
			if get(t, svc, "spec", "type") != tc.serviceType {
				t.Errorf("service type = %v, want %s", get(t, svc, "spec", "type"), tc.serviceType)
			}
			if got := get(t, svc, "spec", "clusterIP"); got != tc.clusterIP {
				t.Errorf("clusterIP = %v, want %v", got, tc.clusterIP)
			}
			if get(t, svc, "spec", "ports", 0, "port") != tc.port || get(t, svc, "spec", "ports", 0, "targetPort") != PortName {
				t.Errorf("service port = %v: want %v targeting the named container port", get(t, svc, "spec", "ports"), tc.port)
			}
			wantLive, wantReady := "/healthz", "/readyz"
			if tc.image != api.DefaultImage {
				wantLive, wantReady = "/ping", "/ping"
			}
			if get(t, c, "livenessProbe", "httpGet", "path") != wantLive || get(t, c, "readinessProbe", "httpGet", "path") != wantReady ||
				get(t, c, "readinessProbe", "httpGet", "port") != PortName {
				t.Errorf("probes = %v / %v", get(t, c, "livenessProbe"), get(t, c, "readinessProbe"))
			}
			sc := get(t, c, "securityContext")
			if get(t, sc, "allowPrivilegeEscalation") != false || get(t, sc, "readOnlyRootFilesystem") != true ||
				get(t, sc, "capabilities", "drop", 0) != "ALL" {
				t.Errorf("container securityContext = %v", sc)
			}
			// The http server never calls the API server: its pods carry no token.
			if got := get(t, dep, "spec", "template", "spec", "automountServiceAccountToken"); got != false {
				t.Errorf("pod automountServiceAccountToken = %v, want false", got)
			}
			psc := get(t, dep, "spec", "template", "spec", "securityContext")
			if get(t, psc, "runAsNonRoot") != true || get(t, psc, "seccompProfile", "type") != "RuntimeDefault" ||
				get(t, psc, "runAsUser") != float64(NonRootUID) {
				t.Errorf("pod securityContext = %v", psc)
			}
			if got := get(t, dep, "spec", "template", "metadata", "annotations", ConfigDigestAnnotation); got != d.ConfigDigest() {
				t.Errorf("config digest annotation = %v, want %s", got, d.ConfigDigest())
			}
			svcSel := get(t, svc, "spec", "selector").(map[string]any)
			if svcSel[LabelInstance] != d.Name || len(svcSel) != 2 {
				t.Errorf("service selector = %v", svcSel)
			}
		})
	}
}

// rolloutOnConfigChange: false leaves the pod template alone, so a config change does not
// roll the pods.
func TestNoConfigDigestWhenOptedOut(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "a", ReplicaCount: 1, Port: 80, ContainerPort: 8080, Image: "x",
		ServiceType: api.ServiceTypeClusterIP, ConfigMapData: map[string]string{"k": "v"}}
	m := run(t, d)
	ann, _ := get(t, m.resources["kubernetes:apps/v1:Deployment"], "spec", "template", "metadata").(map[string]any)["annotations"].(map[string]any)
	if _, ok := ann[ConfigDigestAnnotation]; ok {
		t.Fatalf("pod template annotations = %v: no digest wanted", ann)
	}
}

func TestConfigDigest(t *testing.T) {
	a := api.Desired{ConfigMapData: map[string]string{"a": "1", "b": "2"}}
	b := api.Desired{ConfigMapData: map[string]string{"b": "2", "a": "1"}}
	c := api.Desired{ConfigMapData: map[string]string{"a": "12"}}
	d := api.Desired{ConfigMapData: map[string]string{"a1": "2"}}
	if a.ConfigDigest() != b.ConfigDigest() {
		t.Fatal("equal data, different digests")
	}
	if c.ConfigDigest() == d.ConfigDigest() || a.ConfigDigest() == c.ConfigDigest() {
		t.Fatal("different data, equal digests")
	}
}

// Two CRs in one namespace must never select each other's pods (the original operator's
// hard-coded app label made them do so).
func TestSelectorsDifferPerCR(t *testing.T) {
	a := api.Desired{Namespace: "ns", Name: "a"}
	b := api.Desired{Namespace: "ns", Name: "b"}
	if SelectorLabels(a)[LabelInstance] == SelectorLabels(b)[LabelInstance] {
		t.Fatal("two CRs share a selector")
	}
}

// envFrom sources are referenced by name, never copied, and their digest rolls the pods.
func TestEnvFrom(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "a", ReplicaCount: 1, Port: 80, ContainerPort: 8080, Image: "x",
		ServiceType: api.ServiceTypeClusterIP, EnvDigest: "abc123",
		EnvFrom: []api.EnvRef{{Kind: api.EnvKindConfigMap, Name: "settings"}, {Kind: api.EnvKindSecret, Name: "creds", Prefix: "DB_"}}}
	m := run(t, d)
	dep := m.resources["kubernetes:apps/v1:Deployment"]
	c := get(t, dep, "spec", "template", "spec", "containers", 0)
	if get(t, c, "envFrom", 0, "configMapRef", "name") != "settings" || get(t, c, "envFrom", 1, "secretRef", "name") != "creds" ||
		get(t, c, "envFrom", 1, "prefix") != "DB_" {
		t.Fatalf("envFrom = %v", get(t, c, "envFrom"))
	}
	if got := get(t, dep, "spec", "template", "metadata", "annotations", EnvDigestAnnotation); got != "abc123" {
		t.Fatalf("env digest annotation = %v", got)
	}
}

// No object is awaited (the watcher and the commands watch the rollout themselves), and every
// object points at its KindCustomHttp when the object's UID is known: no ownerReference
// without one, so a manifest applied before the object exists declares none.
func TestSkipAwaitAndOwner(t *testing.T) {
	d := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 1, Port: 80, ContainerPort: 8080,
		Image: api.DefaultImage, ServiceType: api.ServiceTypeClusterIP}
	for name, uid := range map[string]string{"live object": "0f1e2d3c-uid", "manifest without uid": ""} {
		t.Run(name, func(t *testing.T) {
			d.OwnerUID = uid
			m := run(t, d)
			for typ, r := range m.resources {
				if got := get(t, r, "metadata", "annotations", SkipAwait); got != "true" {
					t.Errorf("%s %s = %v, want true", typ, SkipAwait, got)
				}
				owners, _ := get(t, r, "metadata").(map[string]any)["ownerReferences"].([]any)
				if uid == "" {
					if len(owners) != 0 {
						t.Errorf("%s ownerReferences = %v without a UID, want none", typ, owners)
					}
					continue
				}
				if len(owners) != 1 {
					t.Fatalf("%s ownerReferences = %v, want one", typ, owners)
				}
				o := owners[0]
				if get(t, o, "uid") != uid || get(t, o, "kind") != OwnerKind || get(t, o, "apiVersion") != OwnerAPIVersion ||
					get(t, o, "name") != d.Name || get(t, o, "controller") != true {
					t.Errorf("%s ownerReference = %v", typ, o)
				}
			}
		})
	}
}
