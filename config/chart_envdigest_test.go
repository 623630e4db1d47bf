package config_test

import (
	"path"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/pulumi-operator/pulumi-operator/internal/desired"
)

// TestChartEnvDigestKey: envDigestKey.key is stored in the chart's Secret and given to the
// operator as the file its --env-digest-key-file variable names, mounted from that Secret;
// envDigestKey.enabled does the same from an existingSecret; by default the key is derived from
// the passphrase and nothing of it is rendered.
func TestChartEnvDigestKey(t *testing.T) {
	for name, tc := range map[string]struct {
		args      []string
		mounted   bool
		secretKey string // the chart Secret's env-digest-key; "" for none
	}{
		"default":                 {args: []string{"--set", "passphrase=x"}},
		"key":                     {args: []string{"--set", "passphrase=x", "--set", "envDigestKey.key=k3y"}, mounted: true, secretKey: "k3y"},
		"existingSecret, enabled": {args: []string{"--set", "existingSecret=mine", "--set", "envDigestKey.enabled=true"}, mounted: true},
	} {
		t.Run(name, func(t *testing.T) {
			objs, err := helmTemplate(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			var dep *appsv1.Deployment
			var secret *corev1.Secret
			for _, o := range objs {
				switch o.GetKind() {
				case "Deployment":
					dep = convert[appsv1.Deployment](t, o)
				case "Secret":
					if o.GetName() == operatorName+"-secrets" {
						secret = convert[corev1.Secret](t, o)
					}
				}
			}
			if dep == nil {
				t.Fatal("no Deployment")
			}
			var got string
			if secret != nil {
				got = secret.StringData["env-digest-key"]
			}
			if got != tc.secretKey {
				t.Errorf("chart Secret's env-digest-key = %q, want %q", got, tc.secretKey)
			}
			c := dep.Spec.Template.Spec.Containers[0]
			var file string
			for _, e := range c.Env {
				if e.Name == desired.KeyFileEnv {
					file = e.Value
				}
			}
			var mount string
			for _, m := range c.VolumeMounts {
				if m.Name == "secrets" {
					mount = m.MountPath
				}
			}
			var items []string
			for _, v := range dep.Spec.Template.Spec.Volumes {
				if v.Name == "secrets" && v.Secret != nil {
					for _, it := range v.Secret.Items {
						if it.Key == "env-digest-key" {
							items = append(items, path.Join(mount, it.Path))
						}
					}
				}
			}
			if !tc.mounted {
				if file != "" || len(items) != 0 {
					t.Errorf("by default: %s=%q, mounted %v; want neither", desired.KeyFileEnv, file, items)
				}
				return
			}
			if file == "" || !slices.Equal(items, []string{file}) {
				t.Errorf("%s=%q, env-digest-key mounted at %v; want the variable naming the mounted key", desired.KeyFileEnv, file, items)
			}
		})
	}
}
