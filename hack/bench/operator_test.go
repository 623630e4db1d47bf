package main

import "testing"

// TestSplitPassword: a backend URL's password moves out of the URL (the operator refuses one
// there); a URL without one, or one that does not parse, stays as it is.
func TestSplitPassword(t *testing.T) {
	for raw, want := range map[string][2]string{
		"postgres://pulumi:s3cret@127.0.0.1:35452/pulumi?sslmode=disable": {"postgres://pulumi@127.0.0.1:35452/pulumi?sslmode=disable", "s3cret"},
		"postgres://pulumi@127.0.0.1:35452/pulumi":                        {"postgres://pulumi@127.0.0.1:35452/pulumi", ""},
		"file:///var/lib/state":                                           {"file:///var/lib/state", ""},
		"://bad":                                                          {"://bad", ""},
	} {
		if u, p := splitPassword(raw); u != want[0] || p != want[1] {
			t.Errorf("splitPassword(%q) = %q, %q; want %q, %q", raw, u, p, want[0], want[1])
		}
	}
}
