package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestWireNames pins the JSON names both sides rely on: a renamed field would be dropped
// silently by the other side's decoder.
func TestWireNames(t *testing.T) {
	rep := Reply{ID: 7, Code: 255, Kind: KindLocked, Locks: []Lock{{Pid: 12, Username: "u", Hostname: "h", Timestamp: time.Unix(0, 0).UTC()}},
		Stdout: "o", Stderr: "e", Created: true, Changes: map[string]int{"create": 1}, Outputs: map[string]string{"url": "x"}, Pruned: 2, PruneError: "p"}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":7,"code":255,"kind":"locked","locks":[{"pid":12,"username":"u","hostname":"h","timestamp":"1970-01-01T00:00:00Z"}],"stdout":"o","stderr":"e","created":true,"changes":{"create":1},"outputs":{"url":"x"},"pruned":2,"pruneError":"p"}`
	if string(b) != want {
		t.Fatalf("reply JSON\n got %s\nwant %s", b, want)
	}
	req := Request{ID: 1, Cancel: true, Op: OpUp, Stack: "s", Dir: "/d", Client: "127.0.0.1:1", Refresh: true, Keep: 3}
	b, err = json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want = `{"id":1,"cancel":true,"op":"up","stack":"s","dir":"/d","client":"127.0.0.1:1","refresh":true,"keep":3}`
	if string(b) != want {
		t.Fatalf("request JSON\n got %s\nwant %s", b, want)
	}
	var back Reply
	if err := json.Unmarshal([]byte(want), &back); err != nil {
		t.Fatal(err)
	}
}

func TestOutputString(t *testing.T) {
	for name, tc := range map[string]struct {
		v      any
		secret bool
		want   string
	}{
		"string":         {"http://x", false, "http://x"},
		"number":         {float64(3), false, "3"},
		"secret":         {"hunter2", true, SecretOutput},
		"secret map":     {map[string]any{"a": "b"}, true, SecretOutput},
		"nil":            {nil, false, "<nil>"},
		"list":           {[]any{"a", float64(1)}, false, "[a 1]"},
		"map not secret": {map[string]any{"a": "b"}, false, "map[a:b]"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := OutputString(tc.v, tc.secret); got != tc.want {
				t.Fatalf("OutputString(%#v, %v) = %q, want %q", tc.v, tc.secret, got, tc.want)
			}
		})
	}
}

type stepOp string

func TestChanges(t *testing.T) {
	if got := Changes[stepOp](nil); got != nil {
		t.Fatalf("Changes(nil) = %v, want nil", got)
	}
	got := Changes(map[stepOp]int{"create": 3, "same": 1})
	if want := map[string]int{"create": 3, "same": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Changes = %v, want %v", got, want)
	}
}
