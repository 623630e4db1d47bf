package watcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
)

// AdmissionPolicyLabel marks the ValidatingAdmissionPolicy, and its binding, that admits a
// KindCustomHttp only when its author may get every Secret and ConfigMap its spec.envFrom
// names (config/admission/policy.yaml, the chart's templates/admission.yaml), with the value
// AdmissionPolicyValue. The operator finds them by it, whatever the release named them.
const (
	AdmissionPolicyLabel = "groupsp.measutosh.dev/policy"
	AdmissionPolicyValue = "kindcustomhttp-references"
)

// ErrNoAdmissionPolicy means no ValidatingAdmissionPolicy labelled AdmissionPolicyLabel is
// installed and bound: anyone who may write a KindCustomHttp can then hand its pods any Secret
// of the namespace, through the operator.
var ErrNoAdmissionPolicy = errors.New("no admission policy checks who may reference Secrets in spec.envFrom " +
	"(install config/admission, or the chart with admission.enabled; README \"Security\")")

// policyLoadAllowance is how long after the creation of a policy or its binding the operator
// still counts a write as unchecked. An API server loads them through informers of its own, so
// a request made in the first moments may not meet them (one to two seconds on the local
// cluster, README "Security"); creation times have a resolution of one second besides. Too
// short an allowance would call a write checked that was not; too long one only reports, as
// unchecked, objects created right after the policy.
const policyLoadAllowance = 10 * time.Second

// PolicyInForce is the admission policy that checks the references of KindCustomHttps: its
// name, and since when it checks every write, as the operator counts it (the later creation of
// the policy and its binding, plus policyLoadAllowance). A policy or binding changed in place
// keeps its creation time.
type PolicyInForce struct {
	Name  string
	Since time.Time
}

// AdmissionPolicy returns the name of the installed ValidatingAdmissionPolicy labelled
// AdmissionPolicyLabel=AdmissionPolicyValue that a binding with the same label puts to use
// (validationActions Deny). Errors: ErrNoAdmissionPolicy when there is none, or the API error
// of the two lists (forbidden where the operator is granted one namespace only).
func AdmissionPolicy(ctx context.Context, kube kubeclient.Interface) (string, error) {
	p, err := AdmissionPolicyInForce(ctx, kube, "")
	return p.Name, err
}

// AdmissionPolicyInForce is AdmissionPolicy with since when the policy is in force, among the
// policies and bindings matching selector (a label selector; "" is
// AdmissionPolicyLabel=AdmissionPolicyValue). Of several bound policies it returns the one in
// force the longest. A binding's matchResources is not looked at: a binding is taken to cover
// every namespace, as the shipped one does.
func AdmissionPolicyInForce(ctx context.Context, kube kubeclient.Interface, selector string) (PolicyInForce, error) {
	if selector == "" {
		selector = AdmissionPolicyLabel + "=" + AdmissionPolicyValue
	}
	sel := metav1.ListOptions{LabelSelector: selector}
	policies, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, sel)
	if err != nil {
		return PolicyInForce{}, fmt.Errorf("list ValidatingAdmissionPolicies: %w", err)
	}
	bindings, err := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().List(ctx, sel)
	if err != nil {
		return PolicyInForce{}, fmt.Errorf("list ValidatingAdmissionPolicyBindings: %w", err)
	}
	var found PolicyInForce
	for _, p := range policies.Items {
		for _, b := range bindings.Items {
			if b.Spec.PolicyName != p.Name || !slices.Contains(b.Spec.ValidationActions, "Deny") {
				continue
			}
			since := p.CreationTimestamp.Time
			if b.CreationTimestamp.After(since) {
				since = b.CreationTimestamp.Time
			}
			since = since.Add(policyLoadAllowance)
			if found.Name == "" || since.Before(found.Since) {
				found = PolicyInForce{Name: p.Name, Since: since}
			}
		}
	}
	if found.Name == "" {
		return PolicyInForce{}, ErrNoAdmissionPolicy
	}
	return found, nil
}

// policyState is what the operator last found about the admission policy: in force (policy
// set, and now past its Since), missing, or unknown (err: the policies could not be listed).
type policyState struct {
	policy         PolicyInForce
	inForce, known bool
	err            error
}

// same reports whether s and o tell the same: a change of either queues every object again.
func (s policyState) same(o policyState) bool {
	return s.inForce == o.inForce && s.known == o.known && s.policy.Name == o.policy.Name && s.policy.Since.Equal(o.policy.Since)
}

// admissionPolicies looks up the admission policy for the watcher and keeps the answer for
// Options.AdmissionPolicyPoll, so that a reconcile costs no API request; a look after that
// queues every object when the answer changed (their condition ReferencesChecked follows). A
// failed lookup keeps the last answer, unless it is forbidden (the operator may never see the
// policies) or there was none.
type admissionPolicies struct {
	kube     kubeclient.Interface
	selector string
	ttl      time.Duration
	mu       sync.Mutex
	cur      policyState
	at       time.Time // when cur was looked up; zero: never
	gauge    prometheus.GaugeFunc
}

func newAdmissionPolicies(kube kubeclient.Interface, selector string, ttl time.Duration, reg prometheus.Registerer) *admissionPolicies {
	a := &admissionPolicies{kube: kube, selector: selector, ttl: ttl}
	a.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pulumi_operator_admission_policy_in_force",
		Help: "1 when the admission policy that checks who may reference Secrets and ConfigMaps in spec.envFrom is installed, bound and in force, as the operator last looked; 0 when it is not, or cannot be seen.",
	}, func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.cur.inForce {
			return 1
		}
		return 0
	})
	if reg != nil {
		reg.MustRegister(a.gauge)
	}
	return a
}

// state returns the policy's state, looked up again when the last look is older than the ttl
// or force is set; changed reports a look whose answer differs from the one before.
func (a *admissionPolicies) state(ctx context.Context, force bool) (st policyState, changed bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if !force && !a.at.IsZero() && now.Sub(a.at) < a.ttl {
		return a.cur, false
	}
	p, err := AdmissionPolicyInForce(ctx, a.kube, a.selector)
	var next policyState
	switch {
	case err == nil:
		next = policyState{policy: p, known: true, inForce: !now.Before(p.Since)}
	case errors.Is(err, ErrNoAdmissionPolicy):
		next = policyState{known: true, err: err}
	case a.cur.known && !apierrors.IsForbidden(err):
		// A passing failure (the API server restarting): the last answer stands, and the next
		// reconcile looks again.
		return a.cur, false
	default:
		next = policyState{err: err}
	}
	changed = !a.at.IsZero() && !next.same(a.cur)
	a.cur, a.at = next, now
	return next, changed
}

// policyState is the admission policy's state for a reconcile (admissionPolicies.state); a
// change queues every object, so that each one's condition ReferencesChecked follows it.
func (w *Watcher) policyState(ctx context.Context, force bool) policyState {
	st, changed := w.policies.state(ctx, force)
	if changed {
		w.log.Info("admission policy changed: judging every object's references again", "policy", st.policy.Name,
			"inForce", st.inForce, "since", st.policy.Since, "err", st.err)
		for _, obj := range w.informer.GetStore().List() {
			w.enqueue(obj)
		}
	}
	return st
}

// referenceVerdict is the judgement of one object's spec.envFrom references under one look at
// the admission policy: the condition ReferencesChecked's status, reason and message, and the
// record for status.admission (nil: keep the stored one). none is set when spec.envFrom names
// nothing (nothing to judge); secrets lists the Secrets it names ("Secret db", ...).
type referenceVerdict struct {
	none    bool
	status  metav1.ConditionStatus
	reason  string
	message string
	record  *api.AdmissionStatus
	secrets []string
}

// judgeReferences records in o's status whether the writer of its spec was checked by the
// admission policy for the references spec.envFrom makes (condition ReferencesChecked and
// status.admission, verdict) and returns the verdict, with a Warning Event when it turns False.
// An object that does not convert is not judged; one whose spec.envFrom names nothing loses the
// condition and the record.
func (w *Watcher) judgeReferences(ctx context.Context, o *object) referenceVerdict {
	if o.cr == nil {
		return referenceVerdict{none: true}
	}
	if len(o.cr.Spec.EnvFrom) == 0 {
		o.setStatus(func(st *api.KindCustomHttpStatus) {
			meta.RemoveStatusCondition(&st.Conditions, api.ConditionReferencesChecked)
			st.Admission = nil
		})
		return referenceVerdict{none: true}
	}
	v := verdict(o.cr, w.specDigest(o), w.policyState(ctx, false))
	prev := meta.FindStatusCondition(o.cr.Status.Conditions, api.ConditionReferencesChecked)
	if v.status == metav1.ConditionFalse && (prev == nil || prev.Status != v.status || prev.Reason != v.reason) {
		w.recorder.Event(o.u, corev1.EventTypeWarning, v.reason, v.message)
	}
	o.setStatus(func(st *api.KindCustomHttpStatus) {
		setCondition(st, o.gen, api.ConditionReferencesChecked, v.status, v.reason, v.message)
		if v.record != nil {
			st.Admission = v.record
		}
	})
	return v
}

// verdict judges whether the writer of cr's spec, whose digest (specDigest) is digest, was
// checked by the admission policy, under the policy state ps and the record of the last
// judgement in cr's status. A spec is checked when it was written while a policy was in force;
// what the operator can tell:
//
//   - a spec judged before under a policy (the same digest) keeps that judgement, whatever the
//     policy did since: its content is what was checked, or not;
//   - an object created after the policy came into force had every write checked;
//   - a spec that changed since a judgement made under the same policy (the same name and
//     policySince) changed under that policy, so its writer was checked;
//   - anything else was written, as far as the operator can tell, while no policy was in force:
//     False, reason AdmittedWithoutPolicy. Any change of spec but replicaCount and suspend, which
//     the policy asks, or re-creating the object, mends it.
//
// With no policy in force the verdict is False (AdmissionPolicyMissing) and the record of an
// unchanged spec stays, so that its judgement under an earlier policy survives a gap; with the
// policy unknown, Unknown and the record stays.
func verdict(cr *api.KindCustomHttp, digest string, ps policyState) referenceVerdict {
	refs, secrets := references(cr)
	list := strings.Join(refs, ", ")
	rec := cr.Status.Admission
	same := rec != nil && rec.SpecDigest == digest
	v := referenceVerdict{secrets: secrets}
	if !ps.known {
		v.status, v.reason = metav1.ConditionUnknown, api.ReasonAdmissionPolicyUnknown
		v.message = fmt.Sprintf("the operator cannot tell whether an admission policy checks who may reference %s: it may not list ValidatingAdmissionPolicies and their bindings (a namespaced install), or the list failed: %v. Grant it list on both, cluster-wide, as config/rbac does", list, ps.err)
		return v
	}
	if !ps.inForce {
		v.status, v.reason = metav1.ConditionFalse, api.ReasonAdmissionPolicyMissing
		if ps.policy.Name == "" {
			v.message = fmt.Sprintf("spec.envFrom names %s, and no admission policy is in force: whoever writes this object is not checked for get on them, so anyone who may write it can hand its pods their data. Install config/admission (kubectl apply -k config/admission), or the chart with admission.enabled=true (Kubernetes 1.30+; README \"Security\")", list)
		} else {
			v.message = fmt.Sprintf("spec.envFrom names %s, and admission policy %s comes into force only at %s (the API servers may take a moment to load it): whoever writes this object until then may not be checked for get on them", list, ps.policy.Name, ps.policy.Since.UTC().Format(time.RFC3339))
		}
		if !same {
			v.record = &api.AdmissionStatus{SpecDigest: digest}
		}
		return v
	}
	since := ps.policy.Since.UTC().Format(time.RFC3339)
	var checked bool
	switch {
	case same && rec.Policy != "":
		checked = rec.Checked
	case same:
		// First seen while no policy was in force.
	case !cr.CreationTimestamp.Time.Before(ps.policy.Since):
		checked = true
	case rec != nil && rec.Policy == ps.policy.Name && rec.PolicySince != nil && rec.PolicySince.Time.Equal(ps.policy.Since):
		checked = true
	}
	t := metav1.NewTime(ps.policy.Since)
	v.record = &api.AdmissionStatus{SpecDigest: digest, Checked: checked, Policy: ps.policy.Name, PolicySince: &t}
	if checked {
		v.status, v.reason = metav1.ConditionTrue, api.ReasonAdmitted
		v.message = fmt.Sprintf("this spec was written while admission policy %s was in force (since %s): its writer was checked for get on %s", ps.policy.Name, since, list)
		return v
	}
	v.status, v.reason = metav1.ConditionFalse, api.ReasonAdmittedWithoutPolicy
	v.message = fmt.Sprintf("spec.envFrom names %s, and this spec was written before admission policy %s was in force (%s): nobody was checked for get on them. Someone who may get them all re-admits it by changing the spec (anything but replicaCount and suspend), or by re-creating the object (README \"Security\")", list, ps.policy.Name, since)
	return v
}

// references lists what cr's spec.envFrom names, for messages ("Secret db", "ConfigMap cfg"),
// in the spec's order, each once; secrets is the Secrets among them.
func references(cr *api.KindCustomHttp) (all, secrets []string) {
	for _, e := range cr.Spec.EnvFrom {
		var r string
		switch {
		case e.SecretRef != nil:
			r = "Secret " + e.SecretRef.Name
		case e.ConfigMapRef != nil:
			r = "ConfigMap " + e.ConfigMapRef.Name
		default:
			continue
		}
		if slices.Contains(all, r) {
			continue
		}
		all = append(all, r)
		if e.SecretRef != nil {
			secrets = append(secrets, r)
		}
	}
	return all, secrets
}

// specDigest is the SHA-256, in hex, of the JSON of o's spec as stored, without replicaCount
// and suspend: the fields the admission policy lets anyone who may write the object change
// without asking. JSON marshals map keys sorted, so equal specs have equal digests. It is
// remembered per object version (objectState.specDigest), so that a resync of an unchanged
// object, with up to 1 MiB of configMapData, marshals nothing.
func (w *Watcher) specDigest(o *object) string {
	key := cache.MetaObjectToName(o.u)
	if d := w.objects.get(key).specDigest; d.digest != "" && d.uid == o.u.GetUID() && d.resourceVersion == o.u.GetResourceVersion() {
		return d.digest
	}
	spec, _ := o.u.Object["spec"].(map[string]any)
	rest := make(map[string]any, len(spec))
	for k, v := range spec {
		if k != "replicaCount" && k != "suspend" {
			rest[k] = v
		}
	}
	b, _ := json.Marshal(rest) // values of a decoded object always marshal
	sum := sha256.Sum256(b)
	d := hex.EncodeToString(sum[:])
	w.objects.update(key, func(s *objectState) {
		s.specDigest = versionDigest{uid: o.u.GetUID(), resourceVersion: o.u.GetResourceVersion(), digest: d}
	})
	return d
}

// versionDigest is specDigest's result for one version of an object.
type versionDigest struct {
	uid             types.UID
	resourceVersion string
	digest          string
}

// errReferencesUnchecked is the error of a rollout refused under
// Options.RequireAdmissionPolicy.
var errReferencesUnchecked = errors.New("references not checked by an admission policy")

// mayRollOut reports whether an up of o may run under Options.RequireAdmissionPolicy: with it,
// a spec that names a Secret rolls out only while an admission policy is in force, looked up
// afresh (this is where a Secret would reach the pods), and only when its writer was checked
// (verdict). Otherwise it returns the reason for Ready and an error wrapping
// errReferencesUnchecked whose message says what to install or do.
func (w *Watcher) mayRollOut(ctx context.Context, o *object, v referenceVerdict) (string, error) {
	if !w.opts.RequireAdmissionPolicy || v.none || len(v.secrets) == 0 {
		return "", nil
	}
	if v = verdict(o.cr, w.specDigest(o), w.policyState(ctx, true)); v.status == metav1.ConditionTrue {
		return "", nil
	}
	return v.reason, fmt.Errorf("%w: --require-admission-policy holds the rollout of %s: %s", errReferencesUnchecked, strings.Join(v.secrets, ", "), v.message)
}
