package watcher

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/volume"
)

// errServiceTypeNotAllowed marks a spec.serviceType the operator may not create
// (Options.AllowServiceTypes).
var errServiceTypeNotAllowed = errors.New("service type not allowed")

// externalServiceTypes are the service types that expose the pods outside the cluster, which
// the operator creates only where Options.AllowServiceTypes allows them.
var externalServiceTypes = []api.ServiceType{api.ServiceTypeNodePort, api.ServiceTypeLoadBalancer}

// serviceTypeAllowed returns nil when cr's Service may be of the type its spec names: ClusterIP
// and Headless always, NodePort and LoadBalancer only when Options.AllowServiceTypes holds them.
// The operator creates the Service with its own rights, so a policy that keeps the requesting
// user from creating such Services (a quota on services.loadbalancers, a policy engine's rule)
// would not see it. The error wraps errServiceTypeNotAllowed and says what to do.
func (w *Watcher) serviceTypeAllowed(cr *api.KindCustomHttp) error {
	t := cr.Spec.ServiceType
	if !slices.Contains(externalServiceTypes, t) || slices.Contains(w.opts.AllowServiceTypes, t) {
		return nil
	}
	return fmt.Errorf("%w: spec.serviceType %s would expose the pods outside the cluster through a Service the operator creates with its own rights, past the policies that limit who may create one; this operator allows only ClusterIP and Headless%s. Use one of those, or ask the operator's administrator to allow %s (watch --allow-service-types, chart value allowServiceTypes)",
		errServiceTypeNotAllowed, t, allowedList(w.opts.AllowServiceTypes), t)
}

// errStateBudgetExceeded marks an object whose stack would outgrow Options.StateBudget.
var errStateBudgetExceeded = errors.New("state budget exceeded")

// withinStateBudget checks that d's stack fits Options.StateBudget with at least one history
// entry (infra.HistoryWithin), its checkpoint as infra.EstimateStateBytes reckons it. The error wraps
// errStateBudgetExceeded and says what to do; nil without a budget.
func (w *Watcher) withinStateBudget(d api.Desired) error {
	budget := w.opts.StateBudget
	if budget <= 0 {
		return nil
	}
	est := infra.EstimateStateBytes(d)
	if infra.HistoryWithin(budget, est) > 0 {
		return nil
	}
	data := 0
	for k, v := range d.ConfigMapData {
		data += len(k) + len(v)
	}
	return fmt.Errorf("%w: the stack's state would hold about %s (spec.configMapData's %d bytes count three times: the ConfigMap's inputs, its outputs and the provider's copy of the inputs), and the backend holds up to four such checkpoints at once (the state, its previous version, the last update's history entry and the one an up writes), %s, more than this operator's state budget of %s per object. Shrink spec.configMapData (or put the data in a ConfigMap of your own and name it in spec.envFrom, whose data the state does not hold), or ask the operator's administrator to raise the budget (watch --state-budget, chart value stateBudget)",
		errStateBudgetExceeded, humanBytes(est), data, humanBytes(4*est), humanBytes(budget))
}

// volumeHasRoom checks that Options.StateVolume's file system has room for what an up of d
// writes: its checkpoint, the backend's copy of the previous one and a history entry, three
// infra.EstimateStateBytes. The DIY backend's file writes (gocloud.dev's fileblob, through
// Bucket.WriteAll) rename a temporary file into place even when writing it ran out of space,
// so an up on a full volume can leave a truncated checkpoint ("failed to load checkpoint:
// unexpected end of JSON input"): better not to start it. nil without a StateVolume or when
// its file system cannot be read (the metrics report that); the error says how much room
// there is, how much is needed and what to do.
func (w *Watcher) volumeHasRoom(d api.Desired) error {
	if w.opts.StateVolume == "" {
		return nil
	}
	u, ok := volume.Of(w.opts.StateVolume)
	if !ok {
		return nil
	}
	free, need := int64(u.Available), 3*infra.EstimateStateBytes(d)
	if free >= need {
		return nil
	}
	return fmt.Errorf("the state volume (%s) has %s free, and an up of this object writes about %s (its state, the backend's copy of the previous one and a history entry); a write that runs out of space could leave its state truncated, so the up waits (retried with backoff). The operator's administrator frees or grows the volume (chart persistence.size; lower keepHistory or --state-budget)",
		w.opts.StateVolume, humanBytes(free), humanBytes(need))
}

// humanBytes is n in binary units, as resource.Quantity writes a budget ("8Mi" is 8 MiB):
// "512 B", "48.0 KiB", "2.1 MiB". Hand-written: resource.Quantity prints a size that is no
// multiple of a unit in bytes, and go-humanize would be a new module for one message.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// allowedList is ", and " the allowed external types, for serviceTypeAllowed's message ("" for none).
func allowedList(types []api.ServiceType) string {
	var s []string
	for _, t := range types {
		s = append(s, string(t))
	}
	if len(s) == 0 {
		return ""
	}
	return ", and " + strings.Join(s, ", ")
}
