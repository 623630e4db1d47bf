package config_test

import (
	"os"
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
		"main.go":                  false,
		"go.mod":                   false,
		"Dockerfile":               false,
		"Pulumi.yaml":              false,
		"hack/tools/pulumi/go.mod": false,
		"commands/app.go":          false,
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
