package enginehost

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/pkg/v3/backend/diy"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

const requestUsage = "usage: PULUMI_BACKEND_URL=<DIY backend URL> pulumi " + protocol.RequestCommand + " <project> < requests (JSON lines)"

// RequestMain is the pinned CLI's protocol.RequestCommand: args are the command's own arguments
// (after its name), the backend comes from PULUMI_BACKEND_URL, the requests from standard input.
// It exits the process with requestCommand's status; it never returns.
func RequestMain(args []string) {
	os.Exit(requestCommand(context.Background(), os.Getenv("PULUMI_BACKEND_URL"), args, os.Stdin, os.Stdout, os.Stderr))
}

// requestCommand is RequestMain on backend URL url, args being the project: it reads
// protocol.Requests from stdin until its end, runs them at once as the engine host runs requests
// of their Op (host.run: the same code, the same kinds of failure), and writes their
// protocol.Replies as JSON lines to stdout in the order of the requests, whatever the outcomes,
// each one's stderr copied to stderr. It returns the first non-zero Code of the replies, 0 when
// every request succeeded. A wrong command line, backend URL or project is one reply with Code 2
// and kind protocol.KindBadRequest, nothing run; so is a request that is not JSON, or none at
// all (after the replies of the requests read before it), and an OpUp (the CLI's own `pulumi up`
// runs ups), which does not stop the others. A lease that has ended is kind protocol.KindFenced
// for every request, nothing run.
func requestCommand(ctx context.Context, url string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	code := 0
	reply := func(r protocol.Reply) int {
		fmt.Fprint(stderr, r.Stderr)
		_ = enc.Encode(r)
		if code == 0 {
			code = r.Code
		}
		return code
	}
	bad := func(format string, a ...any) protocol.Reply {
		msg := fmt.Sprintf("error: "+format+"\n%s\n", append(a, requestUsage)...)
		return protocol.Reply{Code: 2, Kind: protocol.KindBadRequest, Stderr: msg}
	}
	if len(args) != 1 {
		return reply(bad("want 1 argument, got %d", len(args)))
	}
	if url == "" || !diy.IsDIYBackendURL(url) {
		scheme, _, _ := strings.Cut(url, ":") // the scheme alone: the rest may hold a password
		return reply(bad("PULUMI_BACKEND_URL %q: want a DIY backend's URL (file://, postgres://, s3://, ...)", scheme))
	}
	if err := tokens.ValidateProjectName(args[0]); err != nil {
		return reply(bad("project %q: %v", args[0], err))
	}
	var reqs []protocol.Request
	var unread *protocol.Reply // what ended the requests early: one that is not JSON, or none
	for dec := json.NewDecoder(stdin); ; {
		var req protocol.Request
		err := dec.Decode(&req)
		if err == io.EOF && len(reqs) > 0 {
			break
		}
		if err != nil {
			r := bad("read the request from standard input: %v", err)
			unread = &r
			break
		}
		reqs = append(reqs, req)
	}
	replies := make([]protocol.Reply, len(reqs))
	if err := protocol.LeaseValid(); err != nil {
		for i := range replies {
			replies[i] = protocol.Reply{Code: 255, Kind: protocol.KindFenced, Stderr: "error: " + err.Error() + "\n"}
		}
	} else {
		h := &host{project: args[0], url: url, ctx: ctx, stderr: stderr, stacks: map[string]chan struct{}{}}
		var wg sync.WaitGroup
		for i, req := range reqs {
			if req.Op == protocol.OpUp {
				replies[i] = bad("operation %q: run `pulumi up` for an up", req.Op)
				continue
			}
			wg.Go(func() { replies[i] = h.run(ctx, req, scope{}) })
		}
		wg.Wait()
	}
	for _, r := range replies {
		reply(r)
	}
	if unread != nil {
		reply(*unread)
	}
	return code
}
