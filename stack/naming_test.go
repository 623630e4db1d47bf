package stack

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// hash16 is the first 16 hex digits of the SHA-256 of s, written out here as the rule says.
func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

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
		"too long is hashed": {cluster: "c1", ns: long63, name: long63, want: "c1." + long63 + "." + strings.Repeat("n", 16) + "_" + hash16("c1."+long63+"."+long63)},
		"101 is hashed":      {cluster: strings.Repeat("c", 35), ns: "a", name: long63, want: strings.Repeat("c", 35) + ".a." + strings.Repeat("n", 45) + "_" + hash16(strings.Repeat("c", 35)+".a."+long63)},
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

// A tenant who may create KindCustomHttps in a namespace names one after the tail of another
// object's shortened stack name (what follows "<cluster>.<namespace>."): under the rule with '-'
// that whole name was the shortened one, so both objects shared a stack. Under Name no whole
// name is a shortened one; LegacyName still gives the name of the '-' rule, which is what the
// Manager's migration looks for, and legacyNameOf finds it from the stack name alone.
func TestNameShortenedIsNoOtherObjectsName(t *testing.T) {
	for name, tc := range map[string]struct{ cluster, ns, name string }{
		"cut in the name":      {cluster: "c1", ns: strings.Repeat("s", 63), name: strings.Repeat("a", 40)},
		"cut in the namespace": {cluster: strings.Repeat("c", 40), ns: strings.Repeat("s", 60), name: "web"},
		"long cluster":         {cluster: strings.Repeat("c", 63), ns: "team-a", name: strings.Repeat("w", 63)},
	} {
		t.Run(name, func(t *testing.T) {
			victim, err := Name(tc.cluster, tc.ns, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			legacy, err := LegacyName(tc.cluster, tc.ns, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			full := tc.cluster + "." + tc.ns + "." + tc.name
			if want := full[:83] + "-" + hash16(full); legacy != want {
				t.Fatalf("LegacyName = %q, want the '-' rule's %q", legacy, want)
			}
			if got := legacyNameOf(victim); got != legacy {
				t.Fatalf("legacyNameOf(%q) = %q, want %q", victim, got, legacy)
			}
			if len(victim) != MaxStackNameLength || strings.Count(victim, "_") != 1 {
				t.Fatalf("Name = %q: want %d characters with one '_'", victim, MaxStackNameLength)
			}
			// The claim: a CR whose whole name would be the shortened name, in the victim's
			// cluster and namespace when the cut leaves them whole.
			parts := strings.SplitN(victim, ".", 3)
			if len(parts) == 3 {
				if got, err := Name(parts[0], parts[1], parts[2]); err == nil {
					t.Fatalf("object %s/%s gets stack %q beside the victim's %q: want no such object (its name is no DNS label)", parts[1], parts[2], got, victim)
				}
			}
			lp := strings.SplitN(legacy, ".", 3)
			if len(lp) == 3 && lp[0] == tc.cluster && lp[1] == tc.ns {
				claim, err := Name(lp[0], lp[1], lp[2])
				if err != nil {
					t.Fatalf("the '-' rule's claimant %q: %v", lp[2], err)
				}
				if claim != legacy || claim == victim {
					t.Fatalf("claimant %q gets stack %q, victim %q: want the claimant on the old shared name and the victim elsewhere", lp[2], claim, victim)
				}
			}
		})
	}
}

// Whole names never hold the marker, whatever the DNS labels; shortened ones always do, once.
func FuzzNameWholeAndShortenedDisjoint(f *testing.F) {
	f.Add("c1", "team-a", "web")
	f.Add(strings.Repeat("c", 63), strings.Repeat("n", 63), strings.Repeat("w", 63))
	f.Fuzz(func(t *testing.T, cluster, ns, name string) {
		got, err := Name(cluster, ns, name)
		if err != nil {
			return
		}
		whole := cluster + "." + ns + "." + name
		switch {
		case got == whole && strings.ContainsRune(got, hashMarker):
			t.Fatalf("whole name %q holds %q", got, hashMarker)
		case got != whole && (strings.Count(got, string(hashMarker)) != 1 || len(got) != MaxStackNameLength):
			t.Fatalf("shortened name %q: want %d characters and one %q", got, MaxStackNameLength, hashMarker)
		}
	})
}
