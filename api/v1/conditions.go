package v1

// The status conditions the operator writes on a KindCustomHttp (status.conditions), here
// beside the types so that every reader (the controller, `pulumi-operator reconcile --wait`,
// tests, users' tools) names them alike.

// Condition types, with kstatus meaning (sigs.k8s.io/cli-utils/pkg/kstatus): Ready is True
// when the stack is up to date with the current generation; Reconciling is True while work
// toward it is under way or being retried; Stalled is True when nothing will change until the
// user changes the spec.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"
)

// ConditionReferencesChecked says whether whoever wrote the spec was checked by the admission
// policy (config/admission) for get on every Secret and ConfigMap spec.envFrom names: True with
// reason ReasonAdmitted, False with ReasonAdmittedWithoutPolicy or ReasonAdmissionPolicyMissing,
// Unknown when the operator cannot see the policies. Set only on objects whose spec.envFrom
// names something; status.admission records the spec it judged.
const ConditionReferencesChecked = "ReferencesChecked"

// Condition reasons (CamelCase, as metav1.Condition requires).
const (
	// ReasonSucceeded: the last up of the current generation succeeded.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: an up or destroy is running.
	ReasonProgressing = "Progressing"
	// ReasonInvalidSpec: the spec breaks a rule; the message says which field and why.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonUpdateFailed: Pulumi failed; retried with backoff.
	ReasonUpdateFailed = "UpdateFailed"
	// ReasonUpdateConflict: another update holds the stack's lock; retried with backoff.
	ReasonUpdateConflict = "UpdateConflict"
	// ReasonPluginMissing: the Kubernetes provider plugin is not installed where the operator
	// runs; retried with backoff, so installing it is enough.
	ReasonPluginMissing = "PluginMissing"
	// ReasonBackendUnavailable: the Pulumi state backend could not be opened (down, wrong
	// credentials); nothing ran; retried with backoff. The message names the backend.
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonTimedOut: the up or destroy ran longer than the operator's --operation-timeout and was
	// cancelled; retried with backoff.
	ReasonTimedOut = "TimedOut"
	// ReasonRetrying: Reconciling stays True while a failure is retried.
	ReasonRetrying = "Retrying"
	// ReasonDestroyFailed: deleting the objects failed; the finalizer stays until it succeeds.
	ReasonDestroyFailed = "DestroyFailed"
	// ReasonReplicasUnavailable: the stack is up to date but the Deployment has fewer
	// available pods than asked for, and neither it nor its pods say why. When they do, Ready
	// carries their reason instead: ProgressDeadlineExceeded (then Stalled), FailedCreate (a
	// quota), ImagePullBackOff, ErrImagePull, CrashLoopBackOff, CreateContainerConfigError,
	// Unschedulable, ... (internal/rollout).
	ReasonReplicasUnavailable = "ReplicasUnavailable"
	// ReasonEnvSourceMissing: a ConfigMap or Secret named in spec.envFrom does not exist;
	// retried with backoff and at once when it appears.
	ReasonEnvSourceMissing = "EnvSourceMissing"
	// ReasonEnvSourceNotWatched (an Event, Warning): spec.envFrom names a Secret the operator
	// does not read (its --secret-namespaces): its data reaches the pods, but a change of it
	// does not roll them.
	ReasonEnvSourceNotWatched = "EnvSourceNotWatched"
	// ReasonObjectConflict: a Deployment, Service or ConfigMap of the object's names exists
	// that the operator did not make for it, or the stack of the object's name holds another
	// KindCustomHttp's objects (stack.ErrStackOfAnother); nothing runs until it is gone
	// (retried with backoff). The message names it.
	ReasonObjectConflict = "ObjectConflict"
	// ReasonAdoptionFailed: taking over the original operator's objects
	// (AdoptOriginalAnnotation) failed at an API call; retried with backoff, and every step
	// resumes from what the cluster holds. The message names the call.
	ReasonAdoptionFailed = "AdoptionFailed"
	// ReasonSuspended: spec.suspend is true.
	ReasonSuspended = "Suspended"
	// ReasonStackMissing: a KindCustomHttp being deleted has no stack in the backend, but
	// objects it created still exist; the finalizer stays until the backend is restored or the
	// groupsp.measutosh.dev/on-missing-stack annotation says what to do with them.
	ReasonStackMissing = "StackMissing"
	// ReasonStackRebuilt: an up imported objects of the KindCustomHttp that its stack did not
	// hold (OnMissingStackAdopt). A Normal Event; the message names the objects.
	ReasonStackRebuilt = "StackRebuilt"
	// ReasonDeleteBlocked: a KindCustomHttp being deleted has its stack destroyed, but objects
	// the destroy deleted have been going for longer than the operator waits in silence
	// (something holds them: a finalizer of another controller, a pod that does not stop); the
	// finalizer stays until they are gone. The message names them. Also a Warning Event.
	ReasonDeleteBlocked = "DeleteBlocked"
	// ReasonServiceTypeNotAllowed: spec.serviceType is NodePort or LoadBalancer, which the
	// operator's administrator has not allowed (watch --allow-service-types): the operator would
	// expose the pods outside the cluster with its own rights. Stalled until the spec or the
	// operator's flags change.
	ReasonServiceTypeNotAllowed = "ServiceTypeNotAllowed"
	// ReasonStateBudgetExceeded: the stack's state would outgrow the per-object state budget
	// (watch --state-budget): its checkpoint, as infra.EstimateStateBytes reckons it from the
	// spec (mostly configMapData, which the state holds three times), times the four checkpoints a
	// backend holds of a stack at once during an up (the state, its previous version, the last
	// update's history entry and the one the up writes), would be more bytes than the budget
	// allows. Nothing runs (the objects stay as
	// they are) until the spec shrinks or the operator's flags change. Also a Warning Event.
	ReasonStateBudgetExceeded = "StateBudgetExceeded"
	// ReasonStateVolumeFull: the file system of a file backend has less room than an up of
	// this object writes (its checkpoint, the backend's copy of the previous one and a history
	// entry). The up does not start: a checkpoint write that runs out of space can leave the
	// stack's state truncated. Retried with backoff until there is room. Also a Warning Event.
	ReasonStateVolumeFull = "StateVolumeFull"

	// ReasonAdmitted (ReferencesChecked True): the spec was written while the admission policy
	// was in force, so its writer was checked for get on every reference.
	ReasonAdmitted = "Admitted"
	// ReasonAdmittedWithoutPolicy (ReferencesChecked False, and Ready False under watch
	// --require-admission-policy when a Secret is named): the spec was written before the
	// admission policy now in force was, so nobody was checked for its references. Any change of
	// the spec but replicaCount and suspend, which the policy then asks, or re-creating the
	// object mends it. Also a Warning Event.
	ReasonAdmittedWithoutPolicy = "AdmittedWithoutPolicy"
	// ReasonAdmissionPolicyMissing (ReferencesChecked False, and Ready False under watch
	// --require-admission-policy when a Secret is named): no admission policy is installed and
	// bound, so whoever writes the object is checked for nothing it references. Also a Warning
	// Event.
	ReasonAdmissionPolicyMissing = "AdmissionPolicyMissing"
	// ReasonAdmissionPolicyUnknown (ReferencesChecked Unknown, and Ready False under watch
	// --require-admission-policy when a Secret is named): the operator could not list the
	// admission policies (a namespaced install may not).
	ReasonAdmissionPolicyUnknown = "AdmissionPolicyUnknown"
)
