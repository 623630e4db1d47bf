package commands

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// forbiddenKubeconfig writes a kubeconfig for the local cluster as a new ServiceAccount
// that no role binds: the API server answers every list with 403 Forbidden, and client-go's
// reflector logs it (through klog).
func forbiddenKubeconfig(t *testing.T) string {
	t.Helper()
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "nobody"}}
	if _, err := c.Kube.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	exp := int64(600)
	tok, err := c.Kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "nobody",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for ServiceAccount nobody: %v", err)
	}
	raw, err := clientcmd.LoadFromFile(c.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for name := range raw.AuthInfos {
		raw.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*raw, kc); err != nil {
		t.Fatal(err)
	}
	return kc
}

// runWatchLogs runs watch for a few seconds as a ServiceAccount that may list nothing, with
// the given global flags, and returns what it logged.
func runWatchLogs(t *testing.T, flags ...string) string {
	t.Helper()
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "x")
	var logs bytes.Buffer
	app := App()
	app.ErrWriter = &logs
	args := append([]string{"pulumi-operator", "--kubeconfig", forbiddenKubeconfig(t), "--state-dir", t.TempDir(),
		"--pulumi", testenv.PulumiCLI(t), "--cluster-name", "c"}, flags...)
	args = append(args, "watch", "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	err := app.RunContext(ctx, args)
	t.Logf("watch ended: %v", err)
	return logs.String()
}

// Under --log-format json every line on stderr is one JSON object, client-go's own lines
// (here the reflector's forbidden list, logged through klog) included.
func TestLogsOneJSONStream(t *testing.T) {
	logs := runWatchLogs(t, "--log-format", "json")
	var clientGo, ours int
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line is not JSON: %q (%v)\nall logs:\n%s", line, err, logs)
		}
		if rec["level"] == nil || rec["msg"] == nil {
			t.Fatalf("a log line lacks level or msg: %q", line)
		}
		if strings.Contains(line, "forbidden") {
			if clientGo == 0 {
				t.Logf("client-go's line: %s", line)
			}
			clientGo++
		}
		if rec["msg"] == "watching" {
			ours++
			// The backend the operator keeps its stacks in, as a user reads it from the log.
			if b, _ := rec["backend"].(string); !strings.HasPrefix(b, "file://") {
				t.Errorf("the watching line's backend = %v, want the --state-dir's file:// URL", rec["backend"])
			}
		}
	}
	if clientGo == 0 || ours == 0 {
		t.Fatalf("want client-go's forbidden lists and the operator's own lines, as JSON; got %d and %d in:\n%s", clientGo, ours, logs)
	}
}

// --log-level warn drops info lines, client-go's and the operator's; the errors stay.
func TestLogLevel(t *testing.T) {
	logs := runWatchLogs(t, "--log-format", "json", "--log-level", "warn")
	if strings.Contains(logs, `"level":"INFO"`) || strings.Contains(logs, `"level":"DEBUG"`) {
		t.Fatalf("--log-level warn wrote info or debug lines:\n%s", logs)
	}
	if !strings.Contains(logs, "forbidden") {
		t.Fatalf("--log-level warn dropped client-go's errors:\n%s", logs)
	}
	logs = runWatchLogs(t, "--log-level", "debug")
	if !strings.Contains(logs, "level=DEBUG") {
		t.Fatalf("--log-level debug wrote no debug line:\n%s", logs)
	}
}

// The error a command ends with is the last line on stderr: one JSON record under
// --log-format json, like every line before it (here a watch that cannot read its kubeconfig
// and never starts), else "pulumi-operator: <error>".
func TestFatalErrorInTheLogFormat(t *testing.T) {
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "x")
	missing := filepath.Join(t.TempDir(), "no-such-kubeconfig")
	run := func(format string) (string, int) {
		var stderr bytes.Buffer
		code := Main([]string{"pulumi-operator", "--log-format", format, "--kubeconfig", missing, "--state-dir", t.TempDir(),
			"watch", "--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"}, &stderr)
		return strings.TrimSpace(stderr.String()), code
	}

	out, code := run("json")
	if code == 0 {
		t.Fatalf("watch with a missing kubeconfig exited 0:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	for _, line := range lines {
		if !json.Valid([]byte(line)) {
			t.Fatalf("a line on stderr is not JSON: %q\nall of stderr:\n%s", line, out)
		}
	}
	var last struct {
		Level, Msg, Error string
		ExitCode          int
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Level != "ERROR" || last.Msg != "exiting" || !strings.Contains(last.Error, missing) || last.ExitCode != code {
		t.Errorf("the last line = %+v, want level ERROR, msg exiting, the error naming %s and exit code %d", last, missing, code)
	}

	out, code = run("text")
	lines = strings.Split(out, "\n")
	if l := lines[len(lines)-1]; code == 0 || !strings.HasPrefix(l, "pulumi-operator: ") || !strings.Contains(l, missing) {
		t.Errorf("text: exit %d, last line %q; want a failure and \"pulumi-operator: <error naming the kubeconfig>\"", code, l)
	}
}
