package watcher

import (
	"bytes"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// TestCompareFollowsDeclare pins drift's compare to what the program declares: for each spec,
// the objects Declare makes (infra.Expected, the program run against Pulumi's mocks) show no
// drift, also with what the apiserver and other clients add to them; each declared field people
// change by hand, changed in them, shows drift, with a message naming the field.
func TestCompareFollowsDeclare(t *testing.T) {
	base := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 2, Port: 8080, ContainerPort: 8080, Image: api.DefaultImage,
		ServiceType: api.ServiceTypeClusterIP, RolloutOnConfigChange: true, OwnerUID: "uid"}
	specs := map[string]func(*api.Desired){
		"defaults":        func(*api.Desired) {},
		"headless":        func(d *api.Desired) { d.ServiceType = api.ServiceTypeHeadless },
		"NodePort":        func(d *api.Desired) { d.ServiceType = api.ServiceTypeNodePort },
		"LoadBalancer":    func(d *api.Desired) { d.ServiceType = api.ServiceTypeLoadBalancer },
		"zero replicas":   func(d *api.Desired) { d.ReplicaCount = 0 },
		"own image, port": func(d *api.Desired) { d.Image, d.ContainerPort, d.Port = "registry.example/app:2", 9090, 80 },
		"data":            func(d *api.Desired) { d.ConfigMapData = map[string]string{"hostports": "a,1\n", "k": "v"} },
		"envFrom, no rolls": func(d *api.Desired) {
			d.RolloutOnConfigChange = false
			d.EnvFrom = []api.EnvRef{{Kind: api.EnvKindSecret, Name: "s"}}
			d.EnvDigest = "abc"
		},
	}
	// Each change is made to a field Declare sets for the spec; one that has nothing to change
	// there (no data, no env source) returns false and is not checked.
	changes := map[string]func(o *infra.Objects) bool{
		"replicas": func(o *infra.Objects) bool {
			n := *o.Deployment.Spec.Replicas + 1
			o.Deployment.Spec.Replicas = &n
			return true
		},
		"image": func(o *infra.Objects) bool {
			o.Deployment.Spec.Template.Spec.Containers[0].Image = "other:1"
			return true
		},
		"container port": func(o *infra.Objects) bool {
			o.Deployment.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort++
			return true
		},
		"service type": func(o *infra.Objects) bool {
			o.Service.Spec.Type = map[bool]corev1.ServiceType{true: corev1.ServiceTypeClusterIP, false: corev1.ServiceTypeNodePort}[o.Service.Spec.Type == corev1.ServiceTypeNodePort]
			return true
		},
		"service port": func(o *infra.Objects) bool { o.Service.Spec.Ports[0].Port++; return true },
		"data value": func(o *infra.Objects) bool {
			for k := range o.ConfigMap.Data {
				o.ConfigMap.Data[k] += " changed by hand"
				return true
			}
			return false
		},
		"data key added": func(o *infra.Objects) bool {
			if o.ConfigMap.Data == nil {
				o.ConfigMap.Data = map[string]string{}
			}
			o.ConfigMap.Data["extra.txt"] = "left by an earlier spec"
			return true
		},
		"data key removed": func(o *infra.Objects) bool {
			for k := range o.ConfigMap.Data {
				delete(o.ConfigMap.Data, k)
				return true
			}
			return false
		},
		"env source": func(o *infra.Objects) bool {
			c := &o.Deployment.Spec.Template.Spec.Containers[0]
			if len(c.EnvFrom) == 0 {
				return false
			}
			c.EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}
			return true
		},
		"read-only root off": func(o *infra.Objects) bool {
			*o.Deployment.Spec.Template.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = false
			return true
		},
		"probe path": func(o *infra.Objects) bool {
			o.Deployment.Spec.Template.Spec.Containers[0].LivenessProbe.HTTPGet.Path = "/x"
			return true
		},
		"selector label": func(o *infra.Objects) bool { o.Service.Spec.Selector[infra.LabelInstance] = "other"; return true },
		"label removed":  func(o *infra.Objects) bool { delete(o.Deployment.Labels, infra.LabelManagedBy); return true },
		"volume ConfigMap": func(o *infra.Objects) bool {
			o.Deployment.Spec.Template.Spec.Volumes[0].ConfigMap.Name = "other"
			return true
		},
		"Deployment deleted": func(o *infra.Objects) bool { o.Deployment = nil; return true },
		"Service deleted":    func(o *infra.Objects) bool { o.Service = nil; return true },
		"ConfigMap deleted":  func(o *infra.Objects) bool { o.ConfigMap = nil; return true },
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			d := base
			spec(&d)
			declared := func() infra.Objects {
				o, err := infra.Expected(d)
				if err != nil {
					t.Fatal(err)
				}
				return o
			}
			o := declared()
			if diffs := compare(d, infra.Build(d), o.Deployment, o.Service, o.ConfigMap); len(diffs) != 0 {
				t.Fatalf("what Declare declares shows drift: %v", diffs)
			}
			o = declared()
			defaulted(&o)
			if diffs := compare(d, infra.Build(d), o.Deployment, o.Service, o.ConfigMap); len(diffs) != 0 {
				t.Fatalf("what Declare declares, with the apiserver's defaults and others' additions, shows drift: %v", diffs)
			}
			if d.ServiceType == api.ServiceTypeHeadless {
				o := declared()
				o.Service.Spec.ClusterIP = "10.0.0.9"
				if diffs := compare(d, infra.Build(d), o.Deployment, o.Service, o.ConfigMap); len(diffs) != 1 || !strings.Contains(diffs[0], "spec.clusterIP is 10.0.0.9, want None") {
					t.Errorf("headless Service with a ClusterIP: drift %v, want one naming spec.clusterIP", diffs)
				}
			}
			for what, change := range changes {
				o := declared()
				if !change(&o) {
					continue
				}
				if diffs := compare(d, infra.Build(d), o.Deployment, o.Service, o.ConfigMap); len(diffs) == 0 {
					t.Errorf("%s changed: no drift found", what)
				}
			}
		})
	}
}

// defaulted adds to o what the apiserver defaults or assigns and what other clients add: a
// probe's timeout and thresholds, the image pull policy, a NodePort, a ClusterIP, the
// Deployment's strategy, an annotation of `kubectl rollout restart`, a label of someone else's,
// a second container's worth of nothing (no change to declared fields).
func defaulted(o *infra.Objects) {
	spec := &o.Deployment.Spec
	spec.RevisionHistoryLimit = new(int32)
	spec.ProgressDeadlineSeconds = new(int32)
	*spec.ProgressDeadlineSeconds = 600
	spec.Strategy.Type = "RollingUpdate"
	if spec.Template.Annotations == nil {
		spec.Template.Annotations = map[string]string{}
	}
	spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-11-27T00:00:00Z"
	spec.Template.Spec.RestartPolicy = corev1.RestartPolicyAlways
	spec.Template.Spec.DNSPolicy = corev1.DNSClusterFirst
	c := &spec.Template.Spec.Containers[0]
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.TerminationMessagePath = "/dev/termination-log"
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		p.TimeoutSeconds, p.SuccessThreshold, p.FailureThreshold = 1, 1, 3
		p.HTTPGet.Scheme = corev1.URISchemeHTTP
	}
	mode := int32(0o644)
	spec.Template.Spec.Volumes[0].ConfigMap.DefaultMode = &mode
	o.Deployment.Labels["team"] = "web"
	if o.Service.Spec.ClusterIP == "" {
		o.Service.Spec.ClusterIP = "10.0.0.9"
		o.Service.Spec.ClusterIPs = []string{"10.0.0.9"}
	}
	if o.Service.Spec.Type == corev1.ServiceTypeNodePort || o.Service.Spec.Type == corev1.ServiceTypeLoadBalancer {
		o.Service.Spec.Ports[0].NodePort = 30080
	}
	o.Service.Spec.SessionAffinity = corev1.ServiceAffinityNone
}

// TestDeclaredDiff: the rules of declaredDiff, each way, and the messages that name the field.
func TestDeclaredDiff(t *testing.T) {
	type Inner struct {
		N int32             `json:"n,omitempty"`
		S string            `json:"s,omitempty"`
		P *bool             `json:"p,omitempty"`
		L []string          `json:"l,omitempty"`
		M map[string]string `json:"m,omitempty"`
	}
	type outer struct {
		Inner `json:",inline"`
		I     Inner `json:"i"`
	}
	yes, no := true, false
	long := strings.Repeat("é", 40) + "tail" // 84 bytes; a cut at 64 bytes falls on a rune boundary
	for name, tc := range map[string]struct {
		want, live outer
		opaque     bool   // the values are not to be quoted (a ConfigMap's data)
		diff       string // "" for no drift
	}{
		"all unset":                 {outer{}, outer{I: Inner{N: 1, S: "x", P: &yes, L: []string{"a"}, M: map[string]string{"k": "v"}}}, false, ""},
		"equal":                     {outer{I: Inner{N: 2, S: "x", P: &no}}, outer{I: Inner{N: 2, S: "x", P: &no}}, false, ""},
		"number":                    {outer{I: Inner{N: 2}}, outer{I: Inner{N: 5}}, false, "x.i.n is 5, want 2"},
		"string":                    {outer{I: Inner{S: "a"}}, outer{I: Inner{S: "b"}}, false, "x.i.s is b, want a"},
		"pointer unset":             {outer{I: Inner{P: &no}}, outer{}, false, "x.i.p is unset, want false"},
		"pointer":                   {outer{I: Inner{P: &no}}, outer{I: Inner{P: &yes}}, false, "x.i.p is true, want false"},
		"pointer to false, equal":   {outer{I: Inner{P: &no}}, outer{I: Inner{P: &no}}, false, ""},
		"inline field":              {outer{Inner: Inner{N: 1}}, outer{Inner: Inner{N: 3}}, false, "x.n is 3, want 1"},
		"list longer live":          {outer{I: Inner{L: []string{"a"}}}, outer{I: Inner{L: []string{"a", "b"}}}, false, ""},
		"list shorter live":         {outer{I: Inner{L: []string{"a", "b"}}}, outer{I: Inner{L: []string{"a"}}}, false, "x.i.l has 1 items, want 2"},
		"list item":                 {outer{I: Inner{L: []string{"a"}}}, outer{I: Inner{L: []string{"c"}}}, false, "x.i.l[0] is c, want a"},
		"map extra key live":        {outer{I: Inner{M: map[string]string{"k": "v"}}}, outer{I: Inner{M: map[string]string{"k": "v", "o": "p"}}}, false, ""},
		"map key missing":           {outer{I: Inner{M: map[string]string{"k": "v"}}}, outer{}, false, "x.i.m[k] is missing"},
		"map empty value present":   {outer{I: Inner{M: map[string]string{"k": ""}}}, outer{I: Inner{M: map[string]string{"k": "x"}}}, false, ""},
		"map value":                 {outer{I: Inner{M: map[string]string{"k": "v"}}}, outer{I: Inner{M: map[string]string{"k": "w"}}}, false, "x.i.m[k] is w, want v"},
		"zero number not declared":  {outer{I: Inner{N: 0}}, outer{I: Inner{N: 7}}, false, ""},
		"empty string not declared": {outer{I: Inner{S: ""}}, outer{I: Inner{S: "q"}}, false, ""},
		"long value clipped": {outer{I: Inner{S: "a"}}, outer{I: Inner{S: long}}, false,
			"x.i.s is " + strings.Repeat("é", 32) + "… (84 bytes), want a"},
		"long value clipped at a rune boundary": {outer{I: Inner{S: "a"}}, outer{I: Inner{S: "x" + long}}, false,
			"x.i.s is x" + strings.Repeat("é", 31) + "… (85 bytes), want a"},
		"value at the bound whole": {outer{I: Inner{S: "a"}}, outer{I: Inner{S: strings.Repeat("b", 64)}}, false,
			"x.i.s is " + strings.Repeat("b", 64) + ", want a"},
		"opaque value":       {outer{I: Inner{M: map[string]string{"k": "secret-ish"}}}, outer{I: Inner{M: map[string]string{"k": "v"}}}, true, "x.i.m[k] differs: 1 bytes, want 10 bytes"},
		"opaque unset":       {outer{I: Inner{P: &no}}, outer{}, true, "x.i.p is unset, want 5 bytes"},
		"opaque key missing": {outer{I: Inner{M: map[string]string{"k": "v"}}}, outer{}, true, "x.i.m[k] is missing"},
	} {
		t.Run(name, func(t *testing.T) {
			diff, ok := declaredDiff("x", reflect.ValueOf(tc.want), reflect.ValueOf(tc.live), tc.opaque)
			if ok != (tc.diff == "") || diff != tc.diff {
				t.Errorf("declaredDiff = %q, %v; want %q", diff, ok, tc.diff)
			}
		})
	}
}

// BenchmarkCompare: one drift check of an object whose live objects match, which every object
// pays on each resync and each operator start.
func BenchmarkCompare(b *testing.B) {
	d := api.Desired{Namespace: "ns", Name: "web", ReplicaCount: 2, Port: 8080, ContainerPort: 8080, Image: api.DefaultImage,
		ServiceType: api.ServiceTypeClusterIP, RolloutOnConfigChange: true, OwnerUID: "uid", ConfigMapData: map[string]string{"hostports": "a,1\n"}}
	o, err := infra.Expected(d)
	if err != nil {
		b.Fatal(err)
	}
	defaulted(&o)
	b.ReportAllocs()
	for b.Loop() {
		if diffs := compare(d, infra.Build(d), o.Deployment, o.Service, o.ConfigMap); len(diffs) != 0 {
			b.Fatal(diffs)
		}
	}
}

// TestDeployedAtCovers: readiness trusts a cached Deployment only when it is the object the
// last live read found, at that generation or later; a missing one is never Ready, so its
// absence from the cache is trusted.
func TestDeployedAtCovers(t *testing.T) {
	dep := func(uid types.UID, gen int64) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: uid, Generation: gen}}
	}
	for name, tc := range map[string]struct {
		at   deployedAt
		dep  *appsv1.Deployment
		want bool
	}{
		"same generation":                       {deployedAt{"a", 2}, dep("a", 2), true},
		"later generation (a hand-made change)": {deployedAt{"a", 2}, dep("a", 3), true},
		"earlier generation (the cache lags)":   {deployedAt{"a", 2}, dep("a", 1), false},
		"another object (deleted, made again)":  {deployedAt{"a", 2}, dep("b", 5), false},
		"the live read found none":              {deployedAt{}, dep("a", 1), false},
		"none in the cache":                     {deployedAt{"a", 2}, nil, true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.at.covers(tc.dep); got != tc.want {
				t.Errorf("covers = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestUnitDriftQuotesNoData: a tenant's 1 MiB configMapData value, changed by hand in the live
// ConfigMap to another 1 MiB value, and a 1 MiB image set by hand on the Deployment, are
// repaired with an Event and a log line that stay small: the ConfigMap's values are given by
// their sizes only, the image clipped.
func TestUnitDriftQuotesNoData(t *testing.T) {
	const mib = 1 << 20
	f := newUnit(t, Options{})
	var logs bytes.Buffer
	f.w.log = slog.New(slog.NewTextHandler(&logs, nil))
	declared, byHand := strings.Repeat("d", mib), strings.Repeat("h", mib)
	f.applied(kch("web", map[string]any{"replicaCount": int64(2), "port": int64(80), "configMapData": map[string]any{"big": declared}}))
	dep, _, cm := owned(t, f.stored("web"))
	cm.Data["big"] = byHand
	dep.Spec.Template.Spec.Containers[0].Image = "registry.example/" + strings.Repeat("i", mib)
	f.putOwned(dep, cm)
	logs.Reset()
	if err := f.reconcile("web"); err != nil {
		t.Fatal(err)
	}
	var drift string
	for len(f.recorder.Events) > 0 {
		if e := <-f.recorder.Events; strings.Contains(e, ReasonDriftDetected) {
			drift = e
		}
	}
	if drift == "" {
		t.Fatal("no DriftDetected Event")
	}
	for what, s := range map[string]string{"Event": drift, "log": logs.String()} {
		if len(s) > 2048 {
			t.Errorf("%s is %d bytes, want at most 2048: %.300q", what, len(s), s)
		}
		if strings.Contains(s, "hhhh") || strings.Contains(s, "dddd") {
			t.Errorf("%s quotes the ConfigMap's data: %.300q", what, s)
		}
	}
	for _, want := range []string{"data[big] differs: 1048576 bytes, want 1048576 bytes", "(1048593 bytes)"} {
		if !strings.Contains(drift, want) {
			t.Errorf("Event %.300q does not say %q", drift, want)
		}
	}
}
