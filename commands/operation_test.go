package commands

import (
	"context"
	"strings"
	"testing"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// An Operation's String is its command's name, and only up and preview take many objects.
func TestOperation(t *testing.T) {
	tests := map[Operation]struct {
		name string
		many bool
	}{
		Up:      {"up", true},
		Preview: {"preview", true},
		Refresh: {"refresh", false},
		Destroy: {"destroy", false},
	}
	for op, tc := range tests {
		if op.String() != tc.name || op.manyObjects() != tc.many {
			t.Errorf("%q: String %q, manyObjects %v; want %q, %v", string(op), op.String(), op.manyObjects(), tc.name, tc.many)
		}
	}
}

// An unknown operation runs nothing and says so (no stack manager is needed to find out).
func TestOperationRunUnknown(t *testing.T) {
	res, err := Operation("import").run(context.Background(), nil, "s", api.Desired{}, stack.RunOptions{})
	if err == nil || !strings.Contains(err.Error(), `"import"`) || res.Changed() {
		t.Fatalf("run of an unknown operation = %+v, %v; want an error naming it", res, err)
	}
}
