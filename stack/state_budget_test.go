package stack

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// budgetData is n bytes of configMapData text with what a checkpoint escapes in it (quotes,
// newlines, '<' and '&', which JSON writes as \" \n \u003c \u0026), one key.
func budgetData(n int, round int) map[string]string {
	if n == 0 {
		return nil
	}
	line := fmt.Sprintf("round %d: <tag attr=\"v\"> & more text of a config file\n", round)
	return map[string]string{"config.txt": strings.Repeat(line, n/len(line)+1)[:n]}
}

// stackBytes is the bytes a file backend under dir holds of stackName (its state, .json.bak,
// history; the file driver's .attrs sidecars included) and how many history checkpoints.
func stackBytes(t *testing.T, dir, stackName string) (total int64, checkpoints int) {
	t.Helper()
	for _, f := range filesUnder(t, dir) {
		if !strings.Contains(f, stackName) {
			continue
		}
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		if strings.HasPrefix(filepath.ToSlash(f), ".pulumi/history/") && strings.HasSuffix(f, ".checkpoint.json") {
			checkpoints++
		}
	}
	return total, checkpoints
}

// TestStateBudget: with the real program and provider on the local cluster, on the CLI path and
// through the engine host.
//   - infra.EstimateStateBytes, which the watcher judges an object by before its first up, is
//     never below the checkpoint a real up writes (empty configMapData, 256 KiB, the 1 MiB the
//     CRD allows, each with text a checkpoint escapes), and never above it by more than
//     StateOverheadBytes and a fifth.
//   - An up given RunOptions.KeepHistory (what the watcher passes: infra.HistoryWithin of its
//     budget) keeps that many updates although Config.KeepHistory is 10, so that eight changes
//     of a 1 MiB object leave everything the backend holds of its stack within the budget.
//
// Fails on the code before the state budget: RunOptions had no KeepHistory, and the stack kept
// 10 updates (20 MiB of history beside 4 MiB of state and its copy, over the 11 MiB budget).
func TestStateBudget(t *testing.T) {
	testenv.RequireKubernetesPlugin(t, FindKubernetesPluginFor)
	c := testenv.Connect(t)
	for mode, host := range map[string]bool{"cli": false, "engine host": true} {
		t.Run(mode, func(t *testing.T) {
			ns := c.Namespace(t)
			dir := t.TempDir()
			backend := filepath.Join(dir, "backend")
			m := migrationManager(t, dir, host, c.Kubeconfig)
			m.cfg.KeepHistory = 10
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()

			d := desired(ns, "budget")
			stackName, err := m.StackName(ns, d.Name)
			if err != nil {
				t.Fatal(err)
			}
			stateFile := filepath.Join(backend, filepath.FromSlash(stacksPrefix), stackName+".json")
			for _, size := range []int{0, 256 << 10, api.MaxConfigMapDataBytes} {
				d.ConfigMapData = budgetData(size, 0)
				if _, err := m.Up(ctx, stackName, infra.Program(d), RunOptions{}); err != nil {
					t.Fatalf("up with %d bytes of configMapData: %v", size, err)
				}
				st, err := os.Stat(stateFile)
				if err != nil {
					t.Fatal(err)
				}
				est := infra.EstimateStateBytes(d)
				t.Logf("configMapData %d bytes: checkpoint %d bytes, estimate %d (%.2fx)", size, st.Size(), est, float64(est)/float64(st.Size()))
				if est < st.Size() {
					t.Errorf("configMapData %d bytes: the estimate %d is below the real checkpoint's %d bytes: a budget it fits can be outgrown", size, est, st.Size())
				}
				if limit := infra.StateOverheadBytes + st.Size()*6/5; est > limit {
					t.Errorf("configMapData %d bytes: the estimate %d is more than StateOverheadBytes and a fifth above the real checkpoint's %d bytes", size, est, st.Size())
				}
			}

			// A budget of five and a half checkpoints: the state, its .json.bak, two history
			// entries and the one an up writes before its prune.
			budget := 5*infra.EstimateStateBytes(d) + infra.EstimateStateBytes(d)/2
			keep := infra.HistoryWithin(budget, infra.EstimateStateBytes(d))
			if keep != 2 {
				t.Fatalf("HistoryWithin(%d, %d) = %d, want 2", budget, infra.EstimateStateBytes(d), keep)
			}
			for round := 1; round <= 8; round++ {
				d.ConfigMapData = budgetData(api.MaxConfigMapDataBytes, round)
				if _, err := m.Up(ctx, stackName, infra.Program(d), RunOptions{KeepHistory: keep}); err != nil {
					t.Fatalf("up %d: %v", round, err)
				}
				total, checkpoints := stackBytes(t, backend, stackName)
				if total > budget {
					t.Errorf("after up %d the backend holds %d bytes of the stack, over the budget of %d", round, total, budget)
				}
				if checkpoints > keep {
					t.Errorf("after up %d the history holds %d checkpoints, want at most %d", round, checkpoints, keep)
				}
				if round == 8 {
					t.Logf("after %d ups of a 1 MiB object the stack takes %d bytes (budget %d, %d history checkpoints)", round+3, total, budget, checkpoints)
				}
			}
			if _, err := m.Destroy(ctx, stackName, RunOptions{}); err != nil {
				t.Fatalf("destroy: %v", err)
			}
		})
	}
}
