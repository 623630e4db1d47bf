package stack

import (
	"encoding/json"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
)

// TestHelperCanCreate: the stack-init helper makes stacks only where `pulumi stack init`
// would make the same: a DIY backend and the passphrase secrets provider.
func TestHelperCanCreate(t *testing.T) {
	for _, tc := range []struct {
		backend, secrets string
		want             bool
	}{
		{"file:///var/lib/state", "passphrase", true},
		{"postgres://u:p@127.0.0.1:5432/db", "passphrase", true},
		{"s3://bucket?endpoint=http://127.0.0.1:9000", "passphrase", true},
		{"https://api.pulumi.com", "passphrase", false},
		{"http://127.0.0.1:8080", "passphrase", false},
		{"file:///var/lib/state", "awskms://alias/pulumi", false},
		{"file:///var/lib/state", "default", false},
	} {
		if got := helperCanCreate(Config{BackendURL: tc.backend, SecretsProvider: tc.secrets}); got != tc.want {
			t.Errorf("helperCanCreate(%s, %s) = %v, want %v", tc.backend, tc.secrets, got, tc.want)
		}
	}
}

// TestAdoptPendingEmptyStack: a stack the helper made and no up has run on exports as
// deployment null (no resources, no pending operations); settlePending finds nothing to do.
func TestAdoptPendingEmptyStack(t *testing.T) {
	dep := apitype.UntypedDeployment{Version: 3, Deployment: json.RawMessage("null")}
	_, done, unread, err := adoptPending(dep)
	if err != nil || len(done) != 0 || unread {
		t.Fatalf("adoptPending(null) = %v, %v, %v; want nothing to do", done, unread, err)
	}
}
