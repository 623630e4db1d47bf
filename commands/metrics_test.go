package commands

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// scrape reads the text exposition of /metrics at addr.
func scrape(t *testing.T, addr string) string {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v", addr, resp.StatusCode, err)
	}
	return string(b)
}

// metricName matches the names of the operator's metrics in PromQL and in a scrape.
var metricName = regexp.MustCompile(`\b(?:pulumi_operator_|workqueue_|rest_client_|process_)[a-z_]+\b`)

// The running operator's /metrics, scraped: promlint finds nothing in it; per-object condition series (one per condition,
// at its current status) that follow the object's status and go with it, Pulumi operation and reconcile histograms, the
// work queue and client-go's API request metrics; and every metric the chart's PrometheusRule
// and the Grafana dashboard query is one the operator serves.
func TestWatchMetrics(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	l := newRunner(t)
	objs := createCR(t, c, ns, "scraped")
	addr := testenv.FreeAddr(t)
	wctx, stop := context.WithCancel(ctx)
	out, done := l.startContext(wctx, "watch", "--namespace", ns, "--health-addr", "127.0.0.1:0", "--metrics-addr", addr)
	defer func() {
		stop()
		<-done
	}()
	ready := fmt.Sprintf(`pulumi_operator_condition{name="scraped",namespace=%q,status="True",type="Ready"} 1`, ns)
	var body string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false, nil
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, ready), nil
	})
	if err != nil {
		t.Fatalf("/metrics never showed %s\nwatch:\n%s\nlast scrape:\n%s", ready, out.String(), grep(body, "pulumi_operator_condition"))
	}
	if stale := fmt.Sprintf(`pulumi_operator_condition{name="scraped",namespace=%q,status="False",type="Ready"}`, ns); strings.Contains(body, stale) {
		t.Errorf("/metrics keeps a series for a status Ready no longer has: %s", grep(body, stale))
	}
	for _, want := range []string{
		fmt.Sprintf(`pulumi_operator_condition{name="scraped",namespace=%q,status="False",type="Reconciling"} 1`, ns),
		`pulumi_operator_pulumi_operation_duration_seconds_count{operation="up",result="succeeded"} 1`,
		`pulumi_operator_reconciles_total{result="success"}`,
		`workqueue_adds_total{name="kindcustomhttp"}`,
		`rest_client_requests_total{code="200",host=`,
		`rest_client_request_duration_seconds_bucket{host=`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s; it has:\n%s", want, grep(body, strings.SplitN(want, "{", 2)[0]))
		}
	}

	// Prometheus' own linter (promlint, what `promtool check metrics` runs) finds nothing in
	// what the operator serves: names, units, suffixes, help texts.
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}

	// Every metric the alerts and the dashboard query exists.
	served := map[string]bool{}
	for _, n := range metricName.FindAllString(body, -1) {
		served[n] = true
	}
	for _, f := range []string{"templates/metrics.yaml", "dashboards/pulumi-operator.json"} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "charts", "pulumi-operator", f))
		if err != nil {
			t.Fatal(err)
		}
		var unknown []string
		for _, n := range metricName.FindAllString(string(b), -1) {
			if !served[n] && !slices.Contains(unknown, n) {
				unknown = append(unknown, n)
			}
		}
		if len(unknown) > 0 {
			t.Errorf("%s queries metrics the operator does not serve: %v", f, unknown)
		}
	}

	// Deleted: its series go.
	if err := objs.Delete(ctx, "scraped", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	series := fmt.Sprintf(`name="scraped",namespace=%q`, ns)
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(context.Context) (bool, error) {
		body = scrape(t, addr)
		return !strings.Contains(body, series), nil
	})
	if err != nil {
		t.Fatalf("the deleted object's series stayed:\n%s", grep(body, series))
	}
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// saToken creates ServiceAccount name in ns and returns a token for it.
func saToken(t *testing.T, c *testenv.Cluster, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tok, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// --metrics-secure: /metrics over HTTPS, only for a bearer token the API server accepts and
// allows `get` on /metrics: none is 401, a ServiceAccount without the right 403, one bound to
// a ClusterRole granting the non-resource URL gets the metrics; plain HTTP gets none.
func TestMetricsSecure(t *testing.T) {
	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	l := newRunner(t)
	nobody := saToken(t, c, ns, "nobody")
	scraper := metricsReaderToken(t, c, ns)

	addr := testenv.FreeAddr(t)
	wctx, stop := context.WithCancel(ctx)
	out, done := l.startContext(wctx, "watch", "--namespace", ns, "--health-addr", "", "--metrics-addr", addr, "--metrics-secure")
	defer func() {
		stop()
		<-done
	}()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the operator's self-signed certificate
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, _ := get("")
		return code != 0, nil
	}); err != nil {
		t.Fatalf("the secure metrics endpoint never answered\n%s", out.String())
	}
	for name, tc := range map[string]struct {
		token string
		code  int
		body  string
	}{
		"no token":        {"", http.StatusUnauthorized, "Unauthorized"},
		"bad token":       {"not-a-token", http.StatusUnauthorized, "does not accept this token"},
		"no right":        {nobody, http.StatusForbidden, "system:serviceaccount:" + ns + ":nobody may not get /metrics"},
		"metrics reader":  {scraper, http.StatusOK, "workqueue_depth"},
		"reader (cached)": {scraper, http.StatusOK, "workqueue_depth"},
	} {
		if code, body := get(tc.token); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %.200q, want %d and %q", name, code, body, tc.code, tc.body)
		}
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "workqueue_depth") {
			t.Errorf("plain HTTP got the metrics")
		}
	}
}
