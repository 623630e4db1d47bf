package watcher

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// dataSpec is a spec with configMapData of n bytes under one key.
func dataSpec(n int) string {
	v, _ := json.Marshal(strings.Repeat("x", n))
	return "  replicaCount: 1\n  port: 80\n  configMapData:\n    big: " + string(v) + "\n"
}

// TestStateBudget: under a state budget of 2 MiB (Options.StateBudget), as a tenant would try to
// fill the state volume:
//   - an object with the 1 MiB of configMapData the CRD allows (a state of about 3 MiB, four
//     times that at the peak of an up) is Stalled with reason
//     StateBudgetExceeded, saying the sizes and what to do, with a Warning Event; no up runs and
//     no ConfigMap is made;
//   - an object with 136 KiB keeps one history entry (its up gets RunOptions.KeepHistory 1),
//     one with a few bytes many more; both are Ready;
//   - the stalled object's spec shrunk, it rolls out.
//
// Fails on the code before the state budget: Options had no StateBudget, and the 1 MiB object
// rolled out with the ten history entries of every stack.
func TestStateBudget(t *testing.T) {
	f := startWith(t, Options{StateBudget: 2 << 20})
	f.create(t, "small", dataSpec(64))
	f.waitFor(t, "small", "Ready", readyAt(1))
	if keep := f.stacks.lastKeep(); keep < 10 {
		t.Errorf("the small object's up keeps %d history entries, want 10 or more (its state is about 50 KiB of a 2 MiB budget)", keep)
	}
	f.create(t, "medium", dataSpec(136<<10))
	f.waitFor(t, "medium", "Ready", readyAt(1))
	if keep := f.stacks.lastKeep(); keep != 1 {
		t.Errorf("the 136 KiB object's up keeps %d history entries, want 1 (its state is about 460 KiB of a 2 MiB budget)", keep)
	}
	ups := f.stacks.ups.Load()

	f.create(t, "large", dataSpec(api.MaxConfigMapDataBytes))
	o := f.waitFor(t, "large", "Stalled", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionStalled).Status == metav1.ConditionTrue
	})
	c := cond(o, api.ConditionStalled)
	if !regexp.MustCompile(`would hold about 3\.\d MiB \(spec\.configMapData's 104857\d bytes count three times`).MatchString(c.Message) {
		t.Errorf("Stalled message %q does not say the state's and the data's sizes", c.Message)
	}
	for _, w := range []string{"state budget of 2.0 MiB", "spec.envFrom", "--state-budget", "stateBudget"} {
		if c.Reason != api.ReasonStateBudgetExceeded || !strings.Contains(c.Message, w) {
			t.Errorf("Stalled = %+v, want reason %s saying %q", c, api.ReasonStateBudgetExceeded, w)
		}
	}
	if r := cond(o, api.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != api.ReasonStateBudgetExceeded {
		t.Errorf("Ready = %+v, want False %s", r, api.ReasonStateBudgetExceeded)
	}
	f.waitEvent(t, "large", api.ReasonStateBudgetExceeded)
	if n := f.stacks.ups.Load(); n != ups {
		t.Errorf("%d ups after the large object's create, want %d (none for it)", n, ups)
	}
	if _, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), "large-configmap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of the stalled object: %v, want none", err)
	}

	f.patch(t, "large", `{"spec":{"configMapData":{"big":"small now"}}}`)
	f.waitFor(t, "large", "Ready after the spec shrank", readyAt(2))
}

// lastKeep is the history depth the last up was given (RunOptions.KeepHistory).
func (p *programStacks) lastKeep() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastOpts.KeepHistory
}

// TestStateVolumeFull: the state volume (Options.StateVolume, a real 16 MiB file system filled
// to 2 MiB free) has room for a small object's up but not for one of 512 KiB of configMapData,
// whose up writes about 4.6 MiB (three checkpoints of about 1.5 MiB). The small object is Ready;
// the large one is Ready False with reason StateVolumeFull, saying the room and the need, with a
// Warning Event, and no up runs for it; once the ballast is gone it rolls out (retried with
// backoff). The fixture's backend is elsewhere: the volume here is only what the check reads.
//
// Fails on the code before the check: the up ran, and on a volume without room the DIY
// backend's checkpoint write (gocloud.dev's fileblob renames a file cut short by ENOSPC into
// place) left a truncated state (TestStateVolumeAtAlertLine's note).
func TestStateVolumeFull(t *testing.T) {
	vol := testenv.MountTmpfs(t, 16<<20)
	testenv.FillTo(t, vol, 2<<20)
	f := startWith(t, Options{StateVolume: vol})
	f.create(t, "small", dataSpec(64))
	f.waitFor(t, "small", "Ready", readyAt(1))
	ups := f.stacks.ups.Load()

	f.create(t, "large", dataSpec(512<<10))
	o := f.waitFor(t, "large", "Ready False StateVolumeFull", func(o *api.KindCustomHttp) bool {
		return cond(o, api.ConditionReady).Reason == api.ReasonStateVolumeFull
	})
	c := cond(o, api.ConditionReady)
	if c.Status != metav1.ConditionFalse || !regexp.MustCompile(`has 2\.0 MiB free, and an up of this object writes about 4\.\d MiB`).MatchString(c.Message) ||
		!strings.Contains(c.Message, "persistence.size") {
		t.Errorf("Ready = %+v, want False %s saying the room, the need and what to do", c, api.ReasonStateVolumeFull)
	}
	f.waitEvent(t, "large", api.ReasonStateVolumeFull)
	if n := f.stacks.ups.Load(); n != ups {
		t.Errorf("%d ups after the large object's create, want %d (none for it)", n, ups)
	}
	if _, err := f.cluster.Kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), "large-configmap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap of the object without room: %v, want none", err)
	}

	if err := os.Remove(filepath.Join(vol, "ballast")); err != nil {
		t.Fatal(err)
	}
	f.waitFor(t, "large", "Ready once the volume has room", readyAt(1))
}
