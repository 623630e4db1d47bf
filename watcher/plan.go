package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
)

// plan says whether an up must run, and with a refresh.
type plan struct {
	run, refresh bool
	// why is the Event reason: ReasonCreated/Updated (spec), ReasonProgramUpgraded (only the
	// program version changed), ReasonRepaired (drift), ReasonRequested (annotation).
	why    string
	drift  []string
	digest string
	// requested is the reconcile-request annotation's value, to echo in status.
	requested string
}

// paced reports whether p's up is a refresh a tenant can ask for again and again (a drift
// repair, a reconcile request), which Options.MinRefreshInterval spaces out; the refresh of a
// first up or a retry is not.
func (p plan) paced() bool {
	return p.refresh && (p.why == ReasonRepaired || p.why == ReasonRequested)
}

// background reports whether p's up is work no user waits on as they wait on their create or
// change: a drift repair, a requested refresh, a program upgrade (stack.RunOptions.Background).
func (p plan) background() bool {
	return p.why == ReasonRepaired || p.why == ReasonRequested || p.why == ReasonProgramUpgraded
}

// plan decides, in this order: a spec (or program, stack, salt) not yet applied -> up
// (Created the first time, Updated after; with refresh the first time and on a retry); else a
// new reconcile-request annotation value -> up with refresh (Requested); else a stack whose
// operation the change of leader cut short (interrupted) -> up with refresh (Resumed); else
// owned objects changed by hand -> up with refresh (Repaired); else nothing. objectState's
// applied and handledRequest stand in for status writes the informer has not shown yet, so a
// stale cache copy starts no second up.
func (w *Watcher) plan(ctx context.Context, cr *api.KindCustomHttp, d api.Desired, stackName string) plan {
	p := plan{digest: w.digest(d, stackName), requested: cr.Annotations[api.ReconcileRequestAnnotation]}
	st := w.objects.get(cache.MetaObjectToName(cr))
	switch {
	case !upToDate(cr, p.digest) && st.applied != (applied{cr.UID, cr.Generation, p.digest}):
		p.run, p.why = true, ReasonUpdated
		// With a refresh when what the stack holds may not be what the cluster has: the object's
		// first up (its stack, when it exists already, was made by another cluster, a laptop or
		// an object of the same name before it; stack.Manager skips the refresh of a stack the
		// up creates), and every retry of a failed up (an up that failed on an object deleted
		// behind Pulumi's back fails so until the state forgets it).
		p.refresh = cr.Status.AppliedDigest == "" || retrying(cr)
		if cr.Status.AppliedDigest == "" {
			p.why = ReasonCreated
		} else if w.programOnly(cr, d, stackName) {
			p.why = ReasonProgramUpgraded
		}
	case p.requested != "" && p.requested != cr.Status.LastHandledReconcileAt && p.requested != st.handledRequest:
		p.run, p.refresh, p.why = true, true, ReasonRequested
	case w.interrupted(stackName):
		p.run, p.refresh, p.why = true, true, ReasonResumed
	default:
		if p.drift = w.owned.drift(ctx, p.digest, d); len(p.drift) > 0 {
			p.run, p.refresh, p.why = true, true, ReasonRepaired
		}
	}
	return p
}

// applied is what the last successful up of an object applied.
type applied struct {
	uid        types.UID // a deleted and re-created object is another object
	generation int64
	digest     string
}

// upToDate reports whether the last successful up applied exactly digest to the current
// generation, so that a resync, a restart or an unrelated update starts no Pulumi run.
func upToDate(cr *api.KindCustomHttp, digest string) bool {
	st := cr.Status
	return st.ObservedGeneration == cr.Generation && st.AppliedDigest == digest &&
		meta.FindStatusCondition(st.Conditions, api.ConditionReady) != nil &&
		!retrying(cr)
}

// retrying reports whether the status shows a failed attempt at the current generation that
// is being retried.
func retrying(cr *api.KindCustomHttp) bool {
	c := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionReconciling)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == api.ReasonRetrying && c.ObservedGeneration == cr.Generation
}

// digest is the SHA-256 of everything that decides what an up does: the desired state, the
// program version, the stack and the salt (hex, 64 characters).
func (w *Watcher) digest(d api.Desired, stackName string) string {
	return w.digestAt(d, stackName, infra.ProgramVersion)
}

// digestAt is digest under program version program.
func (w *Watcher) digestAt(d api.Desired, stackName, program string) string {
	b, _ := json.Marshal(struct {
		Desired api.Desired
		Program string
		Stack   string
		Salt    string
	}{d, program, stackName, w.opts.DigestSalt})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// programOnly reports whether the one difference between what cr's stack holds and d is the
// program version: the status's applied digest is d's digest under an earlier program version,
// at the generation the status describes. That earlier version is status.appliedProgramVersion;
// a status written before that field existed is tried against each earlier version
// (infra.ProgramVersion counts up from 1).
func (w *Watcher) programOnly(cr *api.KindCustomHttp, d api.Desired, stackName string) bool {
	st := cr.Status
	if st.ObservedGeneration != cr.Generation || retrying(cr) {
		return false
	}
	candidates := []string{st.AppliedProgramVersion}
	if st.AppliedProgramVersion == "" {
		n, _ := strconv.Atoi(infra.ProgramVersion)
		candidates = candidates[:0]
		for v := 1; v < n; v++ {
			candidates = append(candidates, strconv.Itoa(v))
		}
	}
	for _, v := range candidates {
		if v != infra.ProgramVersion && w.digestAt(d, stackName, v) == st.AppliedDigest {
			return true
		}
	}
	return false
}
