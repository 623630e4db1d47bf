package watcher

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/pulumi-operator/pulumi-operator/internal/fence"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// partitionTransport is a network between one client and the API server that can be cut: while
// cut, a request waits (nothing answers, no reset) until the cut heals, when it goes through as
// TCP's retransmission would deliver it, or until its caller gives up. A partition is a fault the
// real API server cannot be made to produce on demand, hence this stand-in for the network.
type partitionTransport struct {
	next http.RoundTripper

	mu     sync.Mutex
	healed chan struct{} // nil while connected; closed on heal
}

func (p *partitionTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	if healed != nil {
		select {
		case <-healed:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	return p.next.RoundTrip(r)
}

func (p *partitionTransport) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.healed = make(chan struct{})
}

func (p *partitionTransport) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.healed != nil {
		close(p.healed)
		p.healed = nil
	}
}

// A replica cut off from the API server loses the Lease; another takes it; then the cut heals
// while the first one's elector is still releasing. client-go releases after a failed renewal
// (ReleaseOnCancel), judging by the record it last observed (its own: it could read nothing
// since), with the resourceVersion of a Get it sends just before; that Get reaches the server
// once the cut heals and finds the new leader's record. The fencing lock must refuse that
// release: without it the new leader's holding is cleared (holder empty, 1 s lease), any
// replica may take the Lease at once while the new leader still writes, and the new leader
// itself re-acquires with a new acquireTime. On the real API server, with timings where the
// release's Get outlives the takeover as the defaults' do (lease 13 s, renew deadline 10 s, as
// 15 s and 10 s: the release's Get may wait until 2 x renew deadline after the last renewal, and
// the heal comes 4 s or more before that).
func TestReleaseAfterLossKeepsTheNewLeader(t *testing.T) {
	c := testenv.Connect(t)
	ns := c.Namespace(t)
	const (
		leaseDuration = 13 * time.Second
		renewDeadline = 10 * time.Second
		retryPeriod   = time.Second
		name          = "release-after-loss"
	)
	if err := fence.Validate(leaseDuration, renewDeadline, retryPeriod); err != nil {
		t.Fatal(err)
	}
	type replica struct {
		lock     *fencingLock
		leading  chan struct{}
		stopped  chan struct{}
		acquired time.Time
		releases []error
		mu       sync.Mutex
	}
	start := func(ctx context.Context, identity string, cfg *rest.Config) *replica {
		kube, err := kubeclient.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		inner, err := resourcelock.New(resourcelock.LeasesResourceLock, ns, name, kube.CoreV1(), kube.CoordinationV1(),
			resourcelock.ResourceLockConfig{Identity: identity})
		if err != nil {
			t.Fatal(err)
		}
		quiesced := make(chan struct{})
		close(quiesced) // nothing of these replicas runs: a release is held back for nothing else
		r := &replica{lock: newFencingLock(inner, fence.New(renewDeadline), quiesced, renewDeadline+fence.KillAfter),
			leading: make(chan struct{}), stopped: make(chan struct{})}
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &releaseRecorder{fencingLock: r.lock, record: func(err error) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.releases = append(r.releases, err)
			}},
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			ReleaseOnCancel: true, Name: name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(r.leading) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(r.stopped)
			elector.Run(ctx)
		}()
		return r
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	link := &partitionTransport{}
	cfgA := rest.CopyConfig(c.Config)
	cfgA.Wrap(func(rt http.RoundTripper) http.RoundTripper { link.next = rt; return link })
	a := start(ctx, "replica-a", cfgA)
	select {
	case <-a.leading:
	case <-time.After(30 * time.Second):
		t.Fatal("replica-a never led")
	}
	b := start(ctx, "replica-b", c.Config)
	time.Sleep(2 * retryPeriod) // b has read a's renewals
	link.cut()
	cutAt := time.Now()
	select {
	case <-b.leading:
	case <-time.After(3 * leaseDuration):
		t.Fatal("replica-b never took the Lease of the cut-off replica-a")
	}
	lease, err := c.Kube.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "replica-b" || lease.Spec.AcquireTime == nil {
		t.Fatalf("replica-b leads, but the Lease says holder %v", lease.Spec.HolderIdentity)
	}
	acquired := lease.Spec.AcquireTime.Time
	t.Logf("replica-b took the Lease %s after the cut", time.Since(cutAt).Round(100*time.Millisecond))
	link.heal()
	select {
	case <-a.stopped:
	case <-time.After(2 * renewDeadline):
		t.Fatal("replica-a's elector did not stop after the cut healed")
	}
	a.mu.Lock()
	releases := a.releases
	a.mu.Unlock()
	t.Logf("replica-a's elector stopped; its releases: %v", releases)
	// b renews every retryPeriod: a release that cleared b's holding shows as b's re-acquisition
	// (a new acquireTime) or as no holder.
	for deadline := time.Now().Add(3 * retryPeriod); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		l, err := c.Kube.CoordinationV1().Leases(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "replica-b" || l.Spec.AcquireTime == nil || !l.Spec.AcquireTime.Time.Equal(acquired) {
			holder := "<none>"
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			t.Errorf("after replica-a's release the Lease is %q's from %v, not replica-b's holding from %s: the replica that lost it cleared the new leader's (releases %v)",
				holder, l.Spec.AcquireTime, acquired.Format(time.RFC3339Nano), releases)
			break
		}
	}
	var refused bool
	for _, err := range releases {
		refused = refused || errors.Is(err, errNotOurs)
	}
	if !refused {
		t.Errorf("replica-a's releases %v: want one refused with errNotOurs (the Get before it found replica-b's record); if none was tried, the heal came after the release's Get gave up and the test proved nothing", releases)
	}
}

// releaseRecorder is a fencingLock that records the outcome of every release (an Update that
// clears the holder).
type releaseRecorder struct {
	*fencingLock
	record func(error)
}

func (r *releaseRecorder) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := r.fencingLock.Update(ctx, rec)
	if rec.HolderIdentity == "" {
		r.record(err)
	}
	return err
}
