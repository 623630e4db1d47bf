package stack

import (
	"strings"
	"testing"
)

func TestName(t *testing.T) {
	long63 := strings.Repeat("n", 63)
	tests := map[string]struct {
		cluster, ns, name string
		want              string
		wantErr           string
	}{
		"plain":              {cluster: "c1", ns: "peerns", name: "kindcustomhttp-sample", want: "c1.peerns.kindcustomhttp-sample"},
		"other namespace":    {cluster: "c1", ns: "other", name: "kindcustomhttp-sample", want: "c1.other.kindcustomhttp-sample"},
		"other cluster":      {cluster: "c2", ns: "peerns", name: "kindcustomhttp-sample", want: "c2.peerns.kindcustomhttp-sample"},
		"bad cluster":        {cluster: "C_1", ns: "a", name: "b", wantErr: "cluster name"},
		"empty namespace":    {cluster: "c", ns: "", name: "b", wantErr: "namespace"},
		"name with dot":      {cluster: "c", ns: "a", name: "b.c", wantErr: "name"},
		"exactly 100":        {cluster: strings.Repeat("c", 34), ns: "a", name: long63, want: strings.Repeat("c", 34) + ".a." + long63},
		"too long is hashed": {cluster: "c1", ns: long63, name: long63},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Name(tc.cluster, tc.ns, tc.name)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Name error = %v, want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) > MaxStackNameLength {
				t.Fatalf("Name = %q: %d characters, over Pulumi's %d", got, len(got), MaxStackNameLength)
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("Name = %q, want %q", got, tc.want)
			}
			again, _ := Name(tc.cluster, tc.ns, tc.name)
			if again != got {
				t.Fatal("Name is not stable")
			}
		})
	}
}

// Long names that share their first 83 characters must still get different stacks.
func TestNameHashKeepsLongNamesApart(t *testing.T) {
	prefix := strings.Repeat("n", 60)
	a, _ := Name("c1", strings.Repeat("s", 63), prefix+"aaa")
	b, _ := Name("c1", strings.Repeat("s", 63), prefix+"bbb")
	if a == b {
		t.Fatalf("two CRs share stack %q", a)
	}
	if !strings.HasPrefix(a, "c1.sss") {
		t.Fatalf("hashed name %q lost its readable prefix", a)
	}
}
