package config_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	certutil "k8s.io/client-go/util/cert"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// metricsPeers is the values file of a NetworkPolicy admitting Prometheus' pods of namespace
// monitoring and one address range.
const metricsPeers = `
passphrase: x
metrics:
  networkPolicy:
    enabled: true
    from:
      - namespaceSelector:
          matchLabels:
            kubernetes.io/metadata.name: monitoring
        podSelector:
          matchLabels:
            app.kubernetes.io/name: prometheus
      - ipBlock:
          cidr: 10.0.0.0/8
`

// TestChartMetrics: secure metrics are the default (the flag, the reviews' RBAC, an HTTPS
// ServiceMonitor with Prometheus' token, verifying the certificate); metrics.secure=false is plain HTTP without them; the
// optional NetworkPolicy admits only the given peers, only on the metrics port, and refuses to
// render without peers or with a malformed one.
func TestChartMetrics(t *testing.T) {
	values := filepath.Join(t.TempDir(), "peers.yaml")
	if err := os.WriteFile(values, []byte(metricsPeers), 0o600); err != nil {
		t.Fatal(err)
	}
	container := func(t *testing.T, objs []*unstructured.Unstructured) corev1.Container {
		return convert[appsv1.Deployment](t, mustFind(t, objs, "Deployment", operatorName)).Spec.Template.Spec.Containers[0]
	}
	endpoint := func(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
		eps, _, _ := unstructured.NestedSlice(mustFind(t, objs, "ServiceMonitor", operatorName).Object, "spec", "endpoints")
		if len(eps) != 1 {
			t.Fatalf("ServiceMonitor endpoints %v, want one", eps)
		}
		return eps[0].(map[string]any)
	}
	cases := map[string]struct {
		args    []string
		wantErr string
		check   func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		"secure by default": {args: []string{"--set", "passphrase=x", "--set", "metrics.serviceMonitor.enabled=true"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := container(t, objs).Args; !slices.Contains(args, "--metrics-secure") {
				t.Errorf("args %v lack --metrics-secure", args)
			}
			mustFind(t, objs, "ClusterRole", operatorName+"-metrics-auth")
			mustFind(t, objs, "ClusterRoleBinding", operatorName+"-metrics-auth")
			mustFind(t, objs, "ClusterRole", operatorName+"-metrics-reader")
			ep := endpoint(t, objs)
			_, skips, _ := unstructured.NestedFieldNoCopy(ep, "tlsConfig", "insecureSkipVerify")
			ca, _, _ := unstructured.NestedString(ep, "tlsConfig", "ca", "secret", "name")
			if ep["scheme"] != "https" || ep["bearerTokenFile"] != "/var/run/secrets/kubernetes.io/serviceaccount/token" || skips || ca == "" {
				t.Errorf("ServiceMonitor endpoint %v, want https, Prometheus' token, the certificate verified by a CA", ep)
			}
			if o := find(objs, "NetworkPolicy", operatorName+"-metrics"); o != nil {
				t.Errorf("a NetworkPolicy by default: %v", o.Object)
			}
		}},
		"plain": {args: []string{"--set", "passphrase=x", "--set", "metrics.secure=false", "--set", "metrics.serviceMonitor.enabled=true"}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			if args := container(t, objs).Args; slices.Contains(args, "--metrics-secure") {
				t.Errorf("args %v have --metrics-secure", args)
			}
			if o := find(objs, "ClusterRole", operatorName+"-metrics-auth"); o != nil {
				t.Errorf("metrics-auth ClusterRole without secure metrics")
			}
			if ep := endpoint(t, objs); ep["scheme"] != nil || ep["bearerTokenFile"] != nil {
				t.Errorf("ServiceMonitor endpoint %v, want plain HTTP", ep)
			}
		}},
		"network policy": {args: []string{"-f", values}, check: func(t *testing.T, objs []*unstructured.Unstructured) {
			np := convert[networkingv1.NetworkPolicy](t, mustFind(t, objs, "NetworkPolicy", operatorName+"-metrics"))
			d := convert[appsv1.Deployment](t, mustFind(t, objs, "Deployment", operatorName))
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) || np.Namespace != operatorNS {
				t.Errorf("NetworkPolicy %s/%s selects %v, want the operator's pod (labels %v)", np.Namespace, np.Name, np.Spec.PodSelector, d.Spec.Template.Labels)
			}
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(np.Spec.Ingress) != 1 {
				t.Fatalf("NetworkPolicy policyTypes %v, ingress %v: want Ingress, one rule", np.Spec.PolicyTypes, np.Spec.Ingress)
			}
			rule := np.Spec.Ingress[0]
			tcp := corev1.ProtocolTCP
			if want := []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromString("metrics"))}}; !reflect.DeepEqual(rule.Ports, want) {
				t.Errorf("ports %v, want only the metrics port", rule.Ports)
			}
			if !slices.ContainsFunc(container(t, objs).Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
				t.Errorf("the container has no port named metrics for the policy to admit")
			}
			want := []networkingv1.NetworkPolicyPeer{
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
					PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}},
			}
			if !reflect.DeepEqual(rule.From, want) {
				t.Errorf("from %v, want %v", toYAML(rule.From), toYAML(want))
			}
		}},
		// An empty from would admit everyone: the schema refuses it, and so does the template
		// where the schema is skipped.
		"network policy without peers": {args: []string{"--set", "passphrase=x", "--set", "metrics.networkPolicy.enabled=true"},
			wantErr: "/metrics/networkPolicy/from': minItems"},
		"network policy without peers, no schema": {args: []string{"--set", "passphrase=x", "--set", "metrics.networkPolicy.enabled=true", "--skip-schema-validation"},
			wantErr: "metrics.networkPolicy.enabled needs metrics.networkPolicy.from"},
		"peer with an unknown field": {args: []string{"--set", "passphrase=x", "--set", "metrics.networkPolicy.enabled=true", "--set", "metrics.networkPolicy.from[0].podSelectr.matchLabels.a=b"},
			wantErr: "additional properties 'podSelectr' not allowed"},
		"peer with ipBlock and a selector": {args: []string{"-f", values, "--set", "metrics.networkPolicy.from[1].podSelector.matchLabels.a=b"},
			wantErr: "/metrics/networkPolicy/from/1"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			objs, err := helmTemplate(t, tc.args...)
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

// The rendered NetworkPolicy is one the API server accepts (a server-side dry run).
func TestChartMetricsNetworkPolicyValid(t *testing.T) {
	values := filepath.Join(t.TempDir(), "peers.yaml")
	if err := os.WriteFile(values, []byte(metricsPeers), 0o600); err != nil {
		t.Fatal(err)
	}
	objs, err := helmTemplate(t, "-f", values)
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	np := convert[networkingv1.NetworkPolicy](t, mustFind(t, objs, "NetworkPolicy", operatorName+"-metrics"))
	np.Namespace = ns
	if _, err := c.Kube.NetworkingV1().NetworkPolicies(ns).Create(context.Background(), np,
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatalf("the API server refuses the chart's NetworkPolicy: %v\n%s", err, toYAML(np))
	}
}

// TestChartServiceMonitorVerifiesTLS: the ServiceMonitor sends Prometheus' token only to a
// server whose certificate its CA signed for the metrics Service's name. Its tlsConfig, as
// Prometheus would use it (the CA from the Secret and key it names, its serverName, no
// insecureSkipVerify), must accept a server on 127.0.0.1 presenting the certificate the
// Deployment mounts for --metrics-cert-dir, and refuse an impostor's self-signed one for the
// same name. With metrics.tls.secretName the chart makes no certificate and uses that Secret.
func TestChartServiceMonitorVerifiesTLS(t *testing.T) {
	certDir := "/etc/pulumi-operator/metrics-tls"
	mounted := func(t *testing.T, objs []*unstructured.Unstructured) string {
		t.Helper()
		d := convert[appsv1.Deployment](t, mustFind(t, objs, "Deployment", operatorName))
		c := d.Spec.Template.Spec.Containers[0]
		if !slices.Contains(c.Args, "--metrics-cert-dir="+certDir) {
			t.Errorf("args %v lack --metrics-cert-dir=%s", c.Args, certDir)
		}
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == certDir })
		if i < 0 {
			t.Fatalf("nothing mounted at %s: %v", certDir, c.VolumeMounts)
		}
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == c.VolumeMounts[i].Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
		t.Fatalf("the volume at %s is no Secret", certDir)
		return ""
	}
	tlsConfig := func(t *testing.T, objs []*unstructured.Unstructured) map[string]any {
		t.Helper()
		eps, _, _ := unstructured.NestedSlice(mustFind(t, objs, "ServiceMonitor", operatorName).Object, "spec", "endpoints")
		tc, _, _ := unstructured.NestedMap(eps[0].(map[string]any), "tlsConfig")
		if _, skips := tc["insecureSkipVerify"]; skips {
			t.Errorf("tlsConfig %v sets insecureSkipVerify", tc)
		}
		return tc
	}

	t.Run("the chart's certificate", func(t *testing.T) {
		objs, err := helmTemplate(t, "--set", "passphrase=x", "--set", "metrics.serviceMonitor.enabled=true")
		if err != nil {
			t.Fatal(err)
		}
		secretName := mounted(t, objs)
		secret := convert[corev1.Secret](t, mustFind(t, objs, "Secret", secretName))
		tc := tlsConfig(t, objs)
		caSecret, _, _ := unstructured.NestedString(tc, "ca", "secret", "name")
		caKey, _, _ := unstructured.NestedString(tc, "ca", "secret", "key")
		serverName, _, _ := unstructured.NestedString(tc, "serverName")
		if caSecret != secretName || serverName != operatorName+"-metrics."+operatorNS+".svc" {
			t.Fatalf("tlsConfig %v: want the CA of Secret %s and the metrics Service's name", tc, secretName)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(secret.Data[caKey]) {
			t.Fatalf("Secret %s key %q holds no certificate", secretName, caKey)
		}
		client := &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12}

		pair, err := tls.X509KeyPair(secret.Data["tls.crt"], secret.Data["tls.key"])
		if err != nil {
			t.Fatalf("Secret %s: %v", secretName, err)
		}
		if err := handshake(t, pair, client); err != nil {
			t.Errorf("Prometheus' tlsConfig refuses the operator's certificate: %v", err)
		}
		crt, key, err := certutil.GenerateSelfSignedCertKey(serverName, nil, []string{serverName})
		if err != nil {
			t.Fatal(err)
		}
		impostor, err := tls.X509KeyPair(crt, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := handshake(t, impostor, client); err == nil {
			t.Error("Prometheus' tlsConfig accepts an impostor's self-signed certificate: its token would go to anyone")
		}
	})
	t.Run("a Secret of one's own", func(t *testing.T) {
		objs, err := helmTemplate(t, "--set", "passphrase=x", "--set", "metrics.serviceMonitor.enabled=true",
			"--set", "metrics.tls.secretName=metrics-cert", "--set", "metrics.tls.caKey=ca.pem")
		if err != nil {
			t.Fatal(err)
		}
		if name := mounted(t, objs); name != "metrics-cert" {
			t.Errorf("the Deployment mounts Secret %s, want metrics-cert", name)
		}
		tc := tlsConfig(t, objs)
		if name, _, _ := unstructured.NestedString(tc, "ca", "secret", "name"); name != "metrics-cert" {
			t.Errorf("tlsConfig %v: want the CA of Secret metrics-cert", tc)
		}
		if key, _, _ := unstructured.NestedString(tc, "ca", "secret", "key"); key != "ca.pem" {
			t.Errorf("tlsConfig %v: want the CA under ca.pem", tc)
		}
		if o := find(objs, "Secret", operatorName+"-metrics-tls"); o != nil {
			t.Error("the chart makes a certificate although metrics.tls.secretName is set")
		}
	})
}

// handshake serves pair on 127.0.0.1 and returns what a TLS handshake with client config
// c makes of it.
func handshake(t *testing.T, pair tls.Certificate, c *tls.Config) error {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err == nil {
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), c)
	if err != nil {
		return err
	}
	return conn.Close()
}
