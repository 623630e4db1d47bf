package stack

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestChildEnv: what a pulumi process may see of the operator's environment (childEnv): Pulumi's
// settings, the cluster, the backends' credentials and the process basics pass; anything else
// (another tool's token) does not.
func TestChildEnv(t *testing.T) {
	in := []string{
		"PATH=/bin", "HOME=/home/u", "PULUMI_CONFIG_PASSPHRASE_FILE=/run/p", "PULUMI_BACKEND_URL=file:///s",
		"PULUMI_K8S_UPSERT_EXISTING_OBJECTS=true", "KUBECONFIG=/k", "KUBERNETES_SERVICE_HOST=10.0.0.1",
		"PGPASSWORD=pg", "AWS_SECRET_ACCESS_KEY=aws", "LC_ALL=C", "GOMAXPROCS=2",
		"GITHUB_TOKEN=planted", "DATABASE_PASSWORD=planted", "KUBERNETES_TOKEN=planted", "MY_PULUMI_=x", "SECRET",
	}
	want := in[:11]
	if got := childEnv(in); !slices.Equal(got, want) {
		t.Errorf("childEnv =\n%v\nwant\n%v", got, want)
	}
}

// TestCLIRunsWithAllowListedEnv runs a stand-in CLI through trackedCommand, the way every CLI run
// starts, with a planted variable in the operator's environment: the run sees Pulumi's
// variables and its extra ones, never the planted one. The engine host starts from the same
// operatorEnv (engineHostEnv).
func TestCLIRunsWithAllowListedEnv(t *testing.T) {
	t.Setenv("PLANTED_CI_TOKEN", "planted-ci-token-8f3a")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE_FILE", "/run/secrets/passphrase")
	dir := t.TempDir()
	cli := filepath.Join(dir, "pulumi")
	if err := os.WriteFile(cli, []byte("#!/bin/sh\nenv\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &trackedCommand{path: cli, procs: &processSet{}}
	out, _, code, err := c.Run(context.Background(), dir, nil, nil, nil, []string{"EXTRA=1"}, "version")
	if err != nil || code != 0 {
		t.Fatalf("run: exit %d, %v", code, err)
	}
	if strings.Contains(out, "planted-ci-token") {
		t.Errorf("the CLI saw a variable outside the allow-list:\n%s", out)
	}
	for _, want := range []string{"PULUMI_CONFIG_PASSPHRASE_FILE=/run/secrets/passphrase", "EXTRA=1", "PULUMI_AUTOMATION_API=true", "PATH=" + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("the CLI's environment lacks %q:\n%s", want, out)
		}
	}
}
