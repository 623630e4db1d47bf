package config_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

// TestDockerignore: the image's build context (.dockerignore, read and matched by moby's own
// ignorefile and patternmatcher, which Docker and BuildKit use) keeps the sources, the
// Dockerfile and the air-gapped plugin archive under .local/plugins/, and leaves out what must
// never reach an image or a registry's build cache: the dev passphrase and every other state
// under .local/, the built binaries and Pulumi home in bin/, and .git.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(root(".dockerignore"))
	if err != nil {
		t.Fatalf("open .dockerignore: %v (without it `docker build .` sends bin/ and .local/, the dev passphrase included)", err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for path, wantExcluded := range map[string]bool{
		"main.go":         false,
		"go.mod":          false,
		"Dockerfile":      false,
		"Pulumi.yaml":     false,
		"agent/go.mod":    false,
		"commands/app.go": false,
		".local/plugins/pulumi-resource-kubernetes-v4.33.0-linux-amd64.tar.gz": false,
		".local/passphrase":                  true, // make run's dev passphrase
		".local/cluster/kubeconfig":          true,
		".local/test-postgres/postgres.log":  true,
		"bin/pulumi":                         true,
		"bin/pulumi-home/plugins/x/provider": true,
		".git/config":                        true,
	} {
		excluded, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if excluded != wantExcluded {
			t.Errorf("%s: excluded from the build context = %v, want %v", path, excluded, wantExcluded)
		}
	}
}

// TestDockerBuildTargets: `make docker-build` builds IMG (default: the chart's image at its
// appVersion, so that a plain `helm install` finds it) for PLATFORM with CONTAINER_TOOL, and
// `make docker-push` pushes it; the commands are checked with make -n (no engine runs here).
// The Dockerfile's build stage names the Go target from BuildKit's TARGETOS/TARGETARCH before
// its first go build.
func TestDockerBuildTargets(t *testing.T) {
	mk := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-s", "-n"}, args...)...)
		cmd.Dir = root()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	want := "docker build   -t " + imageRepo + ":" + chartAppVersion(t) + " ."
	if got := mk("docker-build"); got != want {
		t.Errorf("make docker-build runs %q, want %q", got, want)
	}
	if got := mk("docker-build", "IMG=r.example/po:dev", "PLATFORM=linux/arm64", "CONTAINER_TOOL=podman"); got != "podman build --platform linux/arm64  -t r.example/po:dev ." {
		t.Errorf("make docker-build with IMG, PLATFORM, CONTAINER_TOOL runs %q", got)
	}
	if got := mk("docker-push", "IMG=r.example/po:dev"); got != "docker push r.example/po:dev" {
		t.Errorf("make docker-push runs %q", got)
	}
	b, err := os.ReadFile(root("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	env := strings.Index(df, "ENV GOOS=${TARGETOS} GOARCH=${TARGETARCH}")
	if env < 0 || strings.Index(df, "ARG TARGETARCH") > env || strings.Index(df, "go build") < env {
		t.Errorf("the Dockerfile's build stage does not set GOOS/GOARCH from TARGETOS/TARGETARCH before its first go build")
	}
}
