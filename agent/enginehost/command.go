package enginehost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

const requestUsage = "usage: PULUMI_BACKEND_URL=<DIY backend URL> pulumi " + protocol.RequestCommand + " <project> < request (one JSON line)"

// RequestMain is the pinned CLI's protocol.RequestCommand: args are the command's own arguments
// (after its name), the backend comes from PULUMI_BACKEND_URL, the request from standard input.
// It exits the process with the reply's code (requestCommand); it never returns.
func RequestMain(args []string) {
	os.Exit(requestCommand(context.Background(), os.Getenv("PULUMI_BACKEND_URL"), args, os.Stdin, os.Stdout, os.Stderr))
}

// requestCommand is RequestMain on backend URL url, args being the project: it reads one
// protocol.Request from stdin, runs it as the engine host runs a request of that Op (host.run:
// the same code, the same kinds of failure), writes its protocol.Reply as one JSON line to stdout,
// whatever the outcome, with its stderr copied to stderr, and returns the reply's Code. A wrong
// command line, backend URL, project or request (an OpUp among them: the CLI's own `pulumi up`
// runs ups) is a reply with Code 2 and kind protocol.KindBadRequest, nothing touched; a lease that
// has ended is kind protocol.KindFenced, nothing run.
func requestCommand(ctx context.Context, url string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	reply := func(r protocol.Reply) int {
		fmt.Fprint(stderr, r.Stderr)
		_ = json.NewEncoder(stdout).Encode(r)
		return r.Code
	}
	bad := func(format string, a ...any) int {
		msg := fmt.Sprintf("error: "+format+"\n%s\n", append(a, requestUsage)...)
		return reply(protocol.Reply{Code: 2, Kind: protocol.KindBadRequest, Stderr: msg})
	}
	if len(args) != 1 {
		return bad("want 1 argument, got %d", len(args))
	}
	if url == "" || !diy.IsDIYBackendURL(url) {
		scheme, _, _ := strings.Cut(url, ":") // the scheme alone: the rest may hold a password
		return bad("PULUMI_BACKEND_URL %q: want a DIY backend's URL (file://, postgres://, s3://, ...)", scheme)
	}
	if err := tokens.ValidateProjectName(args[0]); err != nil {
		return bad("project %q: %v", args[0], err)
	}
	var req protocol.Request
	if err := json.NewDecoder(stdin).Decode(&req); err != nil {
		return bad("read the request from standard input: %v", err)
	}
	if req.Op == protocol.OpUp {
		return bad("operation %q: run `pulumi up` for an up", req.Op)
	}
	if err := protocol.LeaseValid(); err != nil {
		return reply(protocol.Reply{Code: 255, Kind: protocol.KindFenced, Stderr: "error: " + err.Error() + "\n"})
	}
	h := &host{project: args[0], url: url, ctx: ctx, stderr: stderr, stacks: map[string]chan struct{}{}}
	return reply(h.run(ctx, req, scope{}))
}
