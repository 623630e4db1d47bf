package tenants

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// volumeUsage is the size and used bytes of the file system holding dir, as the operator's
// pulumi_operator_state_volume_* gauges count them (statfs).
func volumeUsage(t *testing.T, dir string) (size, used uint64) {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize), (st.Blocks - st.Bfree) * uint64(st.Bsize)
}

// gauge reads the value of an unlabelled gauge from a Prometheus text exposition.
func gauge(t *testing.T, exposition, name string) float64 {
	t.Helper()
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("the metrics have no %s:\n%s", name, exposition)
	return 0
}

// waitReady waits until kch ns/name is Ready at its generation.
func waitReady(t *testing.T, c *testenv.Cluster, ns, name string, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		return ready(ctx, c, ns, name), nil
	})
	if err != nil {
		u, _ := c.Client.Resource(crs).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
		var status any
		if u != nil {
			status = u.Object["status"]
		}
		t.Fatalf("%s/%s not Ready within %s; status %v", ns, name, timeout, status)
	}
}

// TestStateVolumeAtAlertLine: the state volume is a 128 MiB file system already 80 % full (the
// line where the chart's PulumiOperatorStateVolumeFilling alert fires), the operator runs with
// the default --state-budget (16Mi), and a tenant changes an object holding the 1 MiB of
// configMapData the CRD allows over and over (each change about 3.3 MB of state, which every
// history entry copies). Its stack stays within the budget (it keeps two history entries
// instead of --keep-history's 10), the volume stays below full, the operator's gauges put it
// over the alert line, and another tenant's new object and change roll out.
//
// Fails on the code before the state budget: the stack kept 10 history entries of 3.3 MB, the
// 25.6 MiB left filled after about six changes, and from then on ups failed (a run with a
// budget too large for the volume left the stack's checkpoint truncated: "failed to load
// checkpoint: unexpected end of JSON input").
func TestStateVolumeAtAlertLine(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, stack.FindKubernetesPluginFor)
	const volumeSize, budget, changes = 128 * mib, 16 * mib, 8
	vol := testenv.MountTmpfs(t, volumeSize)
	c := testenv.Connect(t)
	c.InstallCRD(t)
	hostile, other := c.Namespace(t), c.Namespace(t)
	bin := buildOperator(t)
	metrics := testenv.FreeAddr(t)
	op := startOperator(t, c, bin, vol, "--metrics-addr", metrics) // the default --state-budget, 16Mi
	readyAfter(t, c, other, "first", 2*time.Minute)

	// Ballast up to the alert line: 80 % of the volume used.
	size, _ := volumeUsage(t, vol)
	ballast := testenv.FillTo(t, vol, int64(size)/5)
	_, used := volumeUsage(t, vol)
	t.Logf("the volume: %d MiB, %.1f %% used with %d MiB of ballast", size/mib, 100*float64(used)/float64(size), ballast/mib)

	// The tenant's object of 1 MiB, changed over and over.
	big := kch(hostile, "big")
	data := func(round int) map[string]any {
		line := fmt.Sprintf("round %d of a config file that fills the ConfigMap\n", round)
		return map[string]any{"big": strings.Repeat(line, 1<<20/len(line))}
	}
	big.Object["spec"].(map[string]any)["configMapData"] = data(0)
	if _, err := c.Client.Resource(crs).Namespace(hostile).Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, hostile, "big", 3*time.Minute)
	stackName, err := stack.Name("tenants", hostile, "big")
	if err != nil {
		t.Fatal(err)
	}
	var most int64
	for round := 1; round <= changes; round++ {
		patch := fmt.Sprintf(`{"spec":{"configMapData":{"big":%q}}}`, data(round)["big"])
		if _, err := c.Client.Resource(crs).Namespace(hostile).Patch(context.Background(), "big", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitReady(t, c, hostile, "big", 3*time.Minute)
		held := dirBytes(t, vol, stackName)
		most = max(most, held)
		if held > budget {
			t.Errorf("after change %d the volume holds %d bytes of the tenant's stack, over the budget of %d", round, held, budget)
		}
	}
	size, used = volumeUsage(t, vol)
	t.Logf("after %d changes of 1 MiB: the tenant's stack takes at most %.1f MiB (budget %d MiB); the volume is %.1f %% used", changes, float64(most)/mib, budget/mib, 100*float64(used)/float64(size))
	if used >= size-mib {
		t.Errorf("the volume is full: %d of %d bytes used", used, size)
	}

	// The alert's expression on the operator's own gauges.
	resp, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ratio := gauge(t, string(body), "pulumi_operator_state_volume_used_bytes") / gauge(t, string(body), "pulumi_operator_state_volume_size_bytes")
	if ratio <= 0.8 {
		t.Errorf("pulumi_operator_state_volume_used_bytes / size_bytes = %.3f, want over 0.8 (the alert's line)", ratio)
	}

	// The other tenant's new object and a change of its first one still roll out.
	readyAfter(t, c, other, "second", 2*time.Minute)
	patch := `{"spec":{"configMapData":{"hostports":"localhost,8081\n"}}}`
	if _, err := c.Client.Resource(crs).Namespace(other).Patch(context.Background(), "first", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, c, other, "first", 2*time.Minute)
	if strings.Contains(op.logs.String(), "no space left on device") {
		t.Errorf("the operator ran out of space:\n%s", op.logs.String())
	}
}

// dirBytes is the bytes of every file under dir whose path holds part (a stack's name).
func dirBytes(t *testing.T, dir, part string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // pruned or replaced while walking
		}
		if err != nil || d.IsDir() || !strings.Contains(p, part) {
			return err
		}
		st, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n += st.Size()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
