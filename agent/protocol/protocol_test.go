package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
)

// TestPruneReplyJSON pins the JSON names of the prune command's reply line (PruneCommand), which
// the operator decodes.
func TestPruneReplyJSON(t *testing.T) {
	b, err := json.Marshal(Reply{Pruned: 2, PruneError: "p"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"code":0,"pruned":2,"pruneError":"p"}`; string(b) != want {
		t.Fatalf("reply JSON\n got %s\nwant %s", b, want)
	}
	var back Reply
	if err := json.Unmarshal(b, &back); err != nil || back.Pruned != 2 || back.PruneError != "p" {
		t.Fatalf("decoded %+v, %v", back, err)
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
