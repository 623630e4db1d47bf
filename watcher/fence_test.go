package watcher

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A leader that loses its Lease cancels its operations and, when one does not stop within
// fenceAfter (its cancel cannot get through), kills the pulumi processes: run returns a few
// seconds after the loss, not after the shutdown grace, and before another replica may lead.
func TestUnitLeaseLossFences(t *testing.T) {
	f := newUnit(t, Options{ShutdownGrace: time.Minute})
	f.stacks.hangHard = true
	if err := f.dyn.Tracker().Add(kch("web", nil)); err != nil {
		t.Fatal(err)
	}
	lost := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- f.w.run(context.Background(), lost, 1) }()
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(f.journal.take(), "up refresh=false"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the up never started")
		}
	}
	close(lost)
	start := time.Now()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run still runs 10 s after the Lease was lost")
	}
	took := time.Since(start)
	if took < fenceAfter || took > fenceAfter+3*time.Second {
		t.Errorf("run returned %s after the loss, want about fenceAfter (%s): a graceful try, then the kill", took, fenceAfter)
	}
	if got := f.journal.take(); !slices.Contains(got, "kill") {
		t.Errorf("journal %q: want the pulumi processes killed", got)
	}
}

// Becoming leader records this host in the Lease's lock holders (bounded, newest last) and
// takes the hosts recorded before as those whose locks may be removed; this host is never one.
func TestRecordLeader(t *testing.T) {
	host, _ := os.Hostname()
	var many []string
	for i := range 40 {
		many = append(many, "old-"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	for name, tc := range map[string]struct {
		before      string
		wantFenced  []string
		wantHolders int
	}{
		"first leader":          {"", nil, 1},
		"after two pods":        {"pod-a,pod-b", []string{"pod-a", "pod-b"}, 3},
		"this host led before":  {host + ",pod-a", []string{"pod-a"}, 2},
		"bounded to the newest": {strings.Join(many, ","), many, maxLockHolders},
	} {
		t.Run(name, func(t *testing.T) {
			lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "lease",
				Annotations: map[string]string{}}}
			if tc.before != "" {
				lease.Annotations[LockHoldersAnnotation] = tc.before
			}
			kube := kubefake.NewClientset(lease)
			f := newUnit(t, Options{})
			if err := f.w.recordLeader(context.Background(), kube, LeaderElection{Namespace: "ops", Name: "lease"}); err != nil {
				t.Fatal(err)
			}
			l, err := kube.CoordinationV1().Leases("ops").Get(context.Background(), "lease", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			holders := strings.Split(l.Annotations[LockHoldersAnnotation], ",")
			if len(holders) != tc.wantHolders || holders[len(holders)-1] != host {
				t.Errorf("holders %v: want %d, this host last", holders, tc.wantHolders)
			}
			f.w.leading.Store(true)
			for _, h := range tc.wantFenced {
				if !f.w.fencedHost(h) {
					t.Errorf("%s not taken as an earlier holder", h)
				}
			}
			if f.w.fencedHost(host) {
				t.Error("this host's own locks taken as an earlier holder's")
			}
			f.w.leading.Store(false)
			if len(tc.wantFenced) > 0 && f.w.fencedHost(tc.wantFenced[0]) {
				t.Error("an earlier holder's locks removable while this process does not lead")
			}
		})
	}
}
