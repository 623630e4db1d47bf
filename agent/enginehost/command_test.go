package enginehost

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// TestRequestCommand: the CLI's request command (protocol.RequestCommand) runs one request as the
// engine host does (a prune, a diagnosis) and prints its Reply, whose code is the exit code, for
// every outcome: a wrong command line, URL, project or request is a bad request with the usage and
// touches nothing (an up is the CLI's own `pulumi up`); a backend that cannot be opened is the
// request's own failure. A password in the URL is never printed.
func TestRequestCommand(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const unreachable = "postgres://u:hunter2@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"
	tests := map[string]struct {
		url    string // "" takes the fixture's file:// URL
		args   []string
		stdin  string
		ok     bool // Code 0
		kind   protocol.ErrorKind
		pruned int
		stderr string
	}{
		"prunes":           {args: []string{"proj"}, stdin: `{"op":"prune","stack":"dev","keep":2}`, ok: true, pruned: 6},
		"keeps all it has": {args: []string{"proj"}, stdin: `{"op":"prune","stack":"dev","keep":9}`, ok: true},
		"diagnoses":        {args: []string{"proj"}, stdin: `{"op":"diagnose","stack":"dev"}`, ok: true, kind: protocol.KindStackMissing},
		"diagnoses an unreachable backend": {url: unreachable, args: []string{"proj"}, stdin: `{"op":"diagnose","stack":"dev"}`, ok: true,
			kind: protocol.KindBackendUnreachable},
		"prune keep 0":     {args: []string{"proj"}, stdin: `{"op":"prune","stack":"dev","keep":0}`, kind: protocol.KindBadRequest, stderr: "keep of at least 1"},
		"an up":            {args: []string{"proj"}, stdin: `{"op":"up","stack":"dev"}`, kind: protocol.KindBadRequest, stderr: "run `pulumi up`"},
		"unknown op":       {args: []string{"proj"}, stdin: `{"op":"refresh","stack":"dev"}`, kind: protocol.KindBadRequest, stderr: `unknown operation "refresh"`},
		"no project":       {stdin: `{"op":"prune","stack":"dev","keep":1}`, kind: protocol.KindBadRequest, stderr: "want 1 argument, got 0"},
		"extra argument":   {args: []string{"proj", "dev"}, stdin: `{}`, kind: protocol.KindBadRequest, stderr: "want 1 argument, got 2"},
		"bad project":      {args: []string{"a b"}, stdin: `{}`, kind: protocol.KindBadRequest, stderr: "project"},
		"request not JSON": {args: []string{"proj"}, stdin: `prune dev`, kind: protocol.KindBadRequest, stderr: "read the request"},
		"Pulumi Cloud": {url: "https://user:hunter2@api.pulumi.com", args: []string{"proj"}, stdin: `{"op":"prune","stack":"dev","keep":1}`,
			kind: protocol.KindBadRequest, stderr: `"https"`},
		"backend unopenable": {url: "file://" + notDir, args: []string{"proj"}, stdin: `{"op":"prune","stack":"dev","keep":1}`,
			kind: protocol.KindFailed, stderr: "error: "},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := pruneFixture(t, 4, nil)
			before := fileNames(t, dir)
			url := tc.url
			if url == "" {
				url = "file://" + dir
			}
			var stdout, stderr bytes.Buffer
			code := requestCommand(context.Background(), url, tc.args, strings.NewReader(tc.stdin), &stdout, &stderr)
			var r protocol.Reply
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.Code != code || (code == 0) != tc.ok || r.Kind != tc.kind {
				t.Fatalf("exit %d, stdout %q (%v); want one reply of the exit's code, ok %v, kind %q", code, stdout.String(), err, tc.ok, tc.kind)
			}
			if !strings.Contains(stderr.String(), tc.stderr) || !strings.Contains(r.Stderr, tc.stderr) ||
				strings.Contains(stdout.String()+stderr.String(), "hunter2") {
				t.Errorf("stderr %q, reply's %q; want %q in both (never the password)", stderr.String(), r.Stderr, tc.stderr)
			}
			// Opening the backend (a diagnosis) may write its meta.yaml; nothing else may appear.
			left := slices.DeleteFunc(fileNames(t, dir), func(f string) bool { return f == filepath.Join(".pulumi", "meta.yaml") })
			if r.Pruned != tc.pruned || len(left) != len(before)-tc.pruned || (!tc.ok && !slices.Equal(left, before)) {
				t.Errorf("reply %+v, %d files left of %d; want %d pruned (none on a failure)", r, len(left), len(before), tc.pruned)
			}
		})
	}
}

// TestRequestCommandBatch: the request command answers every request it is given, one Reply per
// Request in their order, and exits with the first failure's code: a prune and a diagnosis both
// run beside an up, which alone is refused; a line that is not JSON after a request is a bad
// request after that request's reply, which still ran.
func TestRequestCommandBatch(t *testing.T) {
	t.Setenv("PULUMI_DIY_BACKEND_NO_LEGACY_WARNING", "true")
	tests := map[string]struct {
		stdin string
		codes []int
		kinds []protocol.ErrorKind
		exit  int
	}{
		"prune, diagnose, up": {
			stdin: `{"op":"prune","stack":"dev","keep":2}` + "\n" + `{"op":"diagnose","stack":"dev"}` + "\n" + `{"op":"up","stack":"dev"}` + "\n",
			codes: []int{0, 0, 2}, kinds: []protocol.ErrorKind{protocol.KindNone, protocol.KindStackMissing, protocol.KindBadRequest}, exit: 2,
		},
		"all succeed": {
			stdin: `{"op":"diagnose","stack":"dev"}{"op":"prune","stack":"dev","keep":2}`,
			codes: []int{0, 0}, kinds: []protocol.ErrorKind{protocol.KindStackMissing, protocol.KindNone}, exit: 0,
		},
		"not JSON after a request": {
			stdin: `{"op":"prune","stack":"dev","keep":2}` + "\nprune dev\n",
			codes: []int{0, 2}, kinds: []protocol.ErrorKind{protocol.KindNone, protocol.KindBadRequest}, exit: 2,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := pruneFixture(t, 4, nil)
			var stdout, stderr bytes.Buffer
			exit := requestCommand(context.Background(), "file://"+dir, []string{"proj"}, strings.NewReader(tc.stdin), &stdout, &stderr)
			var codes []int
			var kinds []protocol.ErrorKind
			pruned := 0
			for dec := json.NewDecoder(&stdout); dec.More(); {
				var r protocol.Reply
				if err := dec.Decode(&r); err != nil {
					t.Fatalf("stdout is not JSON replies: %v", err)
				}
				codes, kinds, pruned = append(codes, r.Code), append(kinds, r.Kind), pruned+r.Pruned
			}
			if exit != tc.exit || !slices.Equal(codes, tc.codes) || !slices.Equal(kinds, tc.kinds) {
				t.Fatalf("exit %d, replies' codes %v kinds %q; want %d, %v, %q (stderr %q)", exit, codes, kinds, tc.exit, tc.codes, tc.kinds, stderr.String())
			}
			if pruned != 6 {
				t.Errorf("the prune removed %d files, want 6: it ran beside the others", pruned)
			}
		})
	}
}
