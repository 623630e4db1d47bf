// Package cluster_test tests hack/cluster-up.sh, the local simulated cluster that `make test`,
// `make run` and the bench start, and hack/minio-up.sh, the S3 server of `make test`, where a
// test can make one of their parts fail on purpose.
package cluster_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// lastStartSays runs hack/lib/process.sh's proc::last_start_says on a log holding content.
func lastStartSays(t *testing.T, content, pattern string) bool {
	t.Helper()
	log := filepath.Join(t.TempDir(), "kwok.log")
	if err := os.WriteFile(log, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(testenv.RepoRoot(), "hack", "lib", "process.sh")
	err := exec.Command("bash", "-c", `source "$1" && proc::last_start_says "$2" "$3"`, "_", lib, log, pattern).Run()
	if _, exit := err.(*exec.ExitError); err != nil && !exit {
		t.Fatalf("run bash: %v", err)
	}
	return err == nil
}

// TestLastStartSays: only the output of the last start counts, so that a crash kwok was
// restarted after is not read again as the reason of a later exit.
func TestLastStartSays(t *testing.T) {
	const race = "fatal error: concurrent map writes"
	for name, tc := range map[string]struct {
		log  string
		want bool
	}{
		"the last start died of the race": {
			log:  "===== 2026-11-27T15:45:30Z starting kwok\nINFO watch nodes\n" + race + "\n\ngoroutine 54 [running]:\n",
			want: true,
		},
		"an earlier start died of it, the last did not": {
			log:  "===== 2026-11-27T15:45:30Z starting kwok\n" + race + "\n===== 2026-11-27T15:45:31Z starting kwok\nflag provided but not defined: -x\n",
			want: false,
		},
		"no start line: the whole log": {
			log:  race + "\n",
			want: true,
		},
		"an empty log": {},
	} {
		t.Run(name, func(t *testing.T) {
			if got := lastStartSays(t, tc.log, race); got != tc.want {
				t.Errorf("proc::last_start_says = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestClusterUpRestartsKwokAfterItsStartRace: a kwok that dies as it starts with "concurrent
// map writes" (kwok's own start race) is started again, and the cluster comes up; a kwok that
// dies of anything else still fails cluster-up at once, naming what it waited for. The kwok
// here is a script that dies so on its first start and then runs the real kwok.
func TestClusterUpRestartsKwokAfterItsStartRace(t *testing.T) {
	root := testenv.RepoRoot()
	for name, tc := range map[string]struct {
		death    string // what the first start prints before it exits 2
		wantUp   bool
		wantText string // in cluster-up's output
	}{
		"the start race: started again": {
			death:    "fatal error: concurrent map writes",
			wantUp:   true,
			wantText: "kwok died as it started (its start race: concurrent map writes); starting it again (attempt 2 of 3)",
		},
		"any other death: fails": {
			death:    "Error: unknown flag: --no-such-flag",
			wantText: "kwok exited while waiting for kwok healthz",
		},
	} {
		t.Run(name, func(t *testing.T) {
			bin := binDir(t, root, tc.death)
			dir := t.TempDir()
			cmd := exec.Command(filepath.Join(root, "hack", "cluster-up.sh"))
			cmd.Env = append(os.Environ(), "CLUSTER_DIR="+dir, "BIN_DIR="+bin, "CLUSTER_TIMEOUT=60")
			for _, v := range []string{"ETCD_PORT", "ETCD_PEER_PORT", "APISERVER_PORT", "CONTROLLER_MANAGER_PORT", "SCHEDULER_PORT", "KWOK_PORT"} {
				cmd.Env = append(cmd.Env, fmt.Sprintf("CLUSTER_%s=%d", v, testenv.FreePort(t)))
			}
			t.Cleanup(func() {
				down := exec.Command(filepath.Join(root, "hack", "cluster-down.sh"))
				down.Env = append(os.Environ(), "CLUSTER_DIR="+dir)
				if out, err := down.CombinedOutput(); err != nil {
					t.Errorf("cluster-down: %v\n%s", err, out)
				}
			})
			out, err := cmd.CombinedOutput()
			if up := err == nil; up != tc.wantUp {
				t.Fatalf("cluster-up succeeded: %v, want %v (err %v)\n%s", up, tc.wantUp, err, out)
			}
			if !strings.Contains(string(out), tc.wantText) {
				t.Fatalf("cluster-up's output lacks %q:\n%s", tc.wantText, out)
			}
		})
	}
}

// binDir is a BIN_DIR with the cluster's real binaries from the repository's bin/ (`make
// tools`), except kwok: a script that prints death and exits 2 on its first start, and runs
// the real kwok after that.
func binDir(t *testing.T, root, death string) string {
	t.Helper()
	real := filepath.Join(root, "bin")
	dir := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		if _, err := os.Stat(filepath.Join(real, name)); err != nil {
			testenv.Missing(t, fmt.Sprintf("%s/%s: run `make tools`", real, name))
		}
		if name != "kwok" {
			if err := os.Symlink(filepath.Join(real, name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	mark := filepath.Join(dir, "kwok.started")
	script := fmt.Sprintf("#!/bin/sh\nif [ ! -e %q ]; then : >%q; echo %q >&2; exit 2; fi\nexec %q \"$@\"\n",
		mark, mark, death, filepath.Join(real, "kwok"))
	if err := os.WriteFile(filepath.Join(dir, "kwok"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
