package protocol

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestErrorStatusRoundTrip: every kind of failed Reply comes back from its status error as it
// went in, with its kind's gRPC code and the last stderr line as the status message.
func TestErrorStatusRoundTrip(t *testing.T) {
	locks := []Lock{{ID: "l1", Stack: "s", Pid: 12, Username: "u", Hostname: "h", Timestamp: time.Unix(1700000000, 5).UTC()}}
	for kind, code := range codesByKind {
		t.Run(string(kind), func(t *testing.T) {
			in := Reply{Code: 255, Kind: kind, Locks: locks, Stdout: "display\n", Stderr: "warning: w\nerror: " + string(kind) + "\n"}
			err := ErrorStatus(in)
			if got := status.Code(err); got != code {
				t.Errorf("status code %v, want %v", got, code)
			}
			if msg := status.Convert(err).Message(); msg != "error: "+string(kind) {
				t.Errorf("status message %q, want the last stderr line", msg)
			}
			out, ok := ReplyOfError(err)
			if !ok {
				t.Fatalf("ReplyOfError(%v) found no Error detail", err)
			}
			if !reflect.DeepEqual(out, in) {
				t.Fatalf("round trip\n got %+v\nwant %+v", out, in)
			}
		})
	}
}

func TestReplyOfErrorEdges(t *testing.T) {
	t.Run("unknown kind is failed", func(t *testing.T) {
		out, ok := ReplyOfError(ErrorStatus(Reply{Code: 3, Kind: "from-a-newer-host", Stderr: "error: x"}))
		if !ok || out.Kind != KindFailed || out.Code != 3 {
			t.Fatalf("got %+v, %v; want kind %q, code 3", out, ok, KindFailed)
		}
	})
	t.Run("transport errors carry no reply", func(t *testing.T) {
		for _, err := range []error{
			status.Error(codes.Unavailable, "connection refused"),
			fmt.Errorf("wrapped: %w", errors.New("plain")),
			nil,
		} {
			if r, ok := ReplyOfError(err); ok {
				t.Errorf("ReplyOfError(%v) = %+v, true; want false", err, r)
			}
		}
	})
	t.Run("output clipped to its last bytes", func(t *testing.T) {
		big := strings.Repeat("x", maxErrorText) + "error: the end\n"
		out, ok := ReplyOfError(ErrorStatus(Reply{Code: 1, Kind: KindFailed, Stdout: big, Stderr: big}))
		if !ok || len(out.Stdout) != maxErrorText || !strings.HasSuffix(out.Stderr, "error: the end\n") {
			t.Fatalf("clipped to %d bytes (want %d), stderr ends %q", len(out.Stdout), maxErrorText, out.Stderr[len(out.Stderr)-20:])
		}
	})
	t.Run("no stderr", func(t *testing.T) {
		if msg := status.Convert(ErrorStatus(Reply{Code: 1})).Message(); msg != "failed" {
			t.Fatalf("status message %q, want %q", msg, "failed")
		}
	})
}

// TestUpRoundTrip: an Up call's request and reply carry every field of Request and Reply they
// hold.
func TestUpRoundTrip(t *testing.T) {
	req := Request{Op: OpUp, Stack: "s", Dir: "/d", Client: "127.0.0.1:1", Refresh: true, Keep: 3}
	if got := FromUpRequest(ToUpRequest(req)); !reflect.DeepEqual(got, req) {
		t.Fatalf("request round trip\n got %+v\nwant %+v", got, req)
	}
	rep := Reply{Changes: map[string]int{"create": 3, "same": 1}, Outputs: map[string]string{"url": "http://x"}, Pruned: 2, PruneError: "p", Stdout: "o", Stderr: "e"}
	if got := FromUpReply(ToUpReply(rep)); !reflect.DeepEqual(got, rep) {
		t.Fatalf("reply round trip\n got %+v\nwant %+v", got, rep)
	}
	if got := FromUpReply(ToUpReply(Reply{})); got.Changes != nil || got.Outputs != nil {
		t.Fatalf("an empty reply came back with %+v", got)
	}
}
