package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestCommandJSON pins the JSON names of the request command's input and output lines
// (RequestCommand), which the operator and the pinned CLI of one release exchange.
func TestCommandJSON(t *testing.T) {
	b, err := json.Marshal(Reply{Code: 1, Kind: KindLocked, Locks: []Lock{{ID: "a", Pid: 3}}, Pruned: 2, PruneError: "p", Repaired: []string{"f"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"code":1,"kind":"locked","locks":[{"id":"a","pid":3,"username":"","hostname":"","timestamp":"0001-01-01T00:00:00Z"}],"repaired":["f"],"pruned":2,"pruneError":"p"}`
	if string(b) != want {
		t.Fatalf("reply JSON\n got %s\nwant %s", b, want)
	}
	var back Reply
	if err := json.Unmarshal(b, &back); err != nil || back.Pruned != 2 || back.PruneError != "p" || back.Kind != KindLocked || back.Locks[0].ID != "a" {
		t.Fatalf("decoded %+v, %v", back, err)
	}
	b, err = json.Marshal(Request{Op: OpDiagnose, Stack: "s", Keep: 2, Locks: []string{"a"}, Steps: true, Diagnostics: []string{"d"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"op":"diagnose","stack":"s","locks":["a"],"keep":2,"steps":true,"diagnostics":["d"]}`; string(b) != want {
		t.Fatalf("request JSON\n got %s\nwant %s", b, want)
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
