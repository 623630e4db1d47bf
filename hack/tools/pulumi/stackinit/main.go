// Command pulumi-operator-stack-init creates one stack in a DIY backend (file://, postgres://,
// s3://, ... : any URL pkg/v3's backend/diy opens) the way `pulumi stack init` does there, for
// the operator's stack.Manager, which runs it instead of `pulumi stack init` for a new object's
// stack. Usage:
//
//	PULUMI_BACKEND_URL=<backend URL> pulumi-operator-stack-init <project> <stack>
//
// The backend URL comes from the environment, as the pulumi CLI takes it too, because a
// PostgreSQL URL holds the database password, and a command line is world-readable
// (/proc/<pid>/cmdline; the crash tests' TestPassphraseNeverLeaks looks there). It prints "created" (it made the stack) or "exists" (the stack was there already) and exits
// 0. It exits 2 with a usage error for wrong arguments or a URL that is not a DIY backend's
// (Pulumi Cloud's stacks are made by its own API: use `pulumi stack init`) or none, and 1 with the
// backend's error on standard error otherwise (a lock another process holds, a backend that
// cannot be reached or written, an invalid stack name).
//
// Why not `pulumi stack init`: that is a CLI process, which pays the CLI's start (0.21 s,
// mostly package initialisation) and a passphrase key derivation (PBKDF2, 0.18 s) before it
// writes one file; a new object's up paid both twice (docs/benchmarks.md). This command calls
// the same pkg/v3 code the CLI does (backend/diy CreateStack, which takes and releases the
// stack's lock as the CLI does) and derives no key: the stack is created without the initial
// state that names its secrets provider, as Pulumi itself does when there is no secrets
// manager to record (cmd/pulumi/stack/io.go CreateStack). The operator then writes the
// passphrase salt into the stack's Pulumi.<stack>.yaml (stack/salt.go), and the first `pulumi
// up` records it in the state; without one, that up makes a salt itself
// (cmd/pulumi/stack/secrets.go GetSecretsManager: no salt, no provider, so the backend's
// default secrets manager, a new passphrase one). The environment is the CLI's: the Manager
// runs this with the same variables (PULUMI_DIY_BACKEND_*, AWS_*, ...).
//
// It is built in the pinned CLI's own module (hack/tools/pulumi), so that it links exactly the
// pkg/v3 version of the CLI that reads the stacks it writes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag"
	"github.com/pulumi/pulumi/sdk/v3/go/common/diag/colors"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"

	"github.com/pulumi-operator/pulumi-operator/hack/tools/pulumi/internal/diystack"
)

const usage = "usage: PULUMI_BACKEND_URL=<backend URL> pulumi-operator-stack-init <project> <stack>"

func main() {
	os.Exit(run(context.Background(), os.Getenv("PULUMI_BACKEND_URL"), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command on backend URL url and args (without the program name); it returns the
// exit code.
func run(ctx context.Context, url string, args []string, stdout, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	project, stackName := args[0], args[1]
	if url == "" {
		fmt.Fprintf(stderr, "error: no backend URL: set PULUMI_BACKEND_URL\n%s\n", usage)
		return 2
	}
	if !diy.IsDIYBackendURL(url) {
		// The scheme alone: the rest of a URL may hold a password.
		scheme, _, _ := strings.Cut(url, ":")
		fmt.Fprintf(stderr, "error: a %s: backend URL is not a DIY backend's (file://, postgres://, s3://, ...); create stacks in other backends with `pulumi stack init`\n%s\n", scheme, usage)
		return 2
	}
	if err := tokens.ValidateProjectName(project); err != nil {
		fmt.Fprintf(stderr, "error: project name %q: %v\n%s\n", project, err, usage)
		return 2
	}
	created, err := create(ctx, url, project, stackName, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	if created {
		fmt.Fprintln(stdout, "created")
	} else {
		fmt.Fprintln(stdout, "exists")
	}
	return 0
}

// create makes stack stackName of project in the DIY backend at url; false (and no error) when
// it exists. The backend's warnings go to stderr.
func create(ctx context.Context, url, project, stackName string, stderr io.Writer) (bool, error) {
	sink := diag.DefaultSink(io.Discard, stderr, diag.FormatOptions{Color: colors.Never})
	proj := &workspace.Project{Name: tokens.PackageName(project), Runtime: workspace.NewProjectRuntimeInfo("go", nil)}
	b, err := diy.New(ctx, sink, url, proj)
	if err != nil {
		return false, fmt.Errorf("open backend: %w", err)
	}
	return diystack.Create(ctx, b, stackName)
}
