package v1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/pulumi-operator/pulumi-operator/version"
)

// Defaults for the optional spec fields.
const (
	// DefaultImage is the http-server image used when spec.image is empty: this project's own
	// peering server (cmd/http-server) at the project's version. It listens on 8080, serves
	// /healthz and /readyz, and runs as a non-root user on a read-only root file system.
	DefaultImage = version.HTTPServerImage
	// DefaultContainerPort is where DefaultImage listens.
	DefaultContainerPort int32 = 8080
	// DefaultServiceType is used when spec.serviceType is empty.
	DefaultServiceType = ServiceTypeClusterIP
	// ConfigMountPath is where the ConfigMap's keys appear as files in each pod.
	ConfigMountPath = "/config"
	// ConfigMapSuffix is appended to the CR's name to name its ConfigMap, as the original did.
	ConfigMapSuffix = "-configmap"
)

// Bounds of the spec. The CRD's markers (types.go) state the same numbers, so the apiserver
// refuses at admission what Validate refuses in a file (`pulumi-operator up -f`); each is as
// generous as what Kubernetes itself would accept downstream, so no manifest that could ever
// have worked is refused.
const (
	// MaxReplicaCount bounds spec.replicaCount. Kubernetes puts no bound on a Deployment's
	// replicas, but its scalability thresholds stop at clusters of 5000 nodes: one http-server
	// pod per node of the largest cluster it supports. The bound also caps the pods the watcher
	// lists while a rollout is under way (internal/rollout).
	MaxReplicaCount = 5000
	// MaxPort bounds spec.port and spec.containerPort (from 1): a TCP port is 16 bits, the range
	// the apiserver takes for a Service's and a container's port.
	MaxPort = 65535
	// MaxConfigMapDataBytes bounds the summed size in bytes of configMapData's values: the
	// apiserver rejects a ConfigMap whose values hold more than 1 MiB, keys not counted
	// (k8s.io/kubernetes validation.ValidateConfigMap, core.MaxSecretSize).
	MaxConfigMapDataBytes = 1024 * 1024
	// MaxConfigMapDataKeys bounds the number of configMapData keys. Kubernetes bounds only a
	// ConfigMap's size, not its keys; each key is a file under /config that the kubelet writes
	// again on every update, and 1024 files is far beyond what a server's configuration needs.
	MaxConfigMapDataKeys = 1024
	// MaxConfigMapKeyLength is the longest configMapData key, in characters: the apiserver's
	// own limit for a ConfigMap key (validation.IsConfigMapKey, a DNS-1123 subdomain's 253).
	MaxConfigMapKeyLength = 253
	// MaxImageLength bounds spec.image, in characters. Kubernetes puts no bound on a
	// container's image, but an image reference (github.com/distribution/reference) has a name
	// of at most 255 characters (NameTotalLengthMax), a tag of at most 128 and a digest of 71
	// (sha256) or 135 (sha512): 520 in all; 1024 leaves room for longer digests.
	MaxImageLength = 1024
)

// Desired is a KindCustomHttp's validated desired state with every default filled in: the
// single input of the Pulumi program (package infra). It is a plain value, comparable by
// Digest, and holds no Kubernetes object metadata beyond the identity.
type Desired struct {
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	ReplicaCount  int32             `json:"replicaCount"`
	Port          int32             `json:"port"`
	ContainerPort int32             `json:"containerPort"`
	Image         string            `json:"image"`
	ServiceType   ServiceType       `json:"serviceType"`
	ConfigMapData map[string]string `json:"configMapData,omitempty"`
	// EnvFrom are the ConfigMaps and Secrets whose keys become environment variables.
	EnvFrom []EnvRef `json:"envFrom,omitempty"`
	// EnvDigest is a digest of the data of every EnvFrom source, filled in by whoever can read
	// them (the watcher and the commands, both through package desired; never the data
	// itself), so that a change of that data rolls the pods. Empty when EnvFrom is.
	EnvDigest string `json:"envDigest,omitempty"`
	// RolloutOnConfigChange puts ConfigDigest into the pod template, so a configMapData change
	// rolls the pods (as Stakater Reloader does). Default true.
	RolloutOnConfigChange bool `json:"rolloutOnConfigChange"`
	// OwnerUID is the KindCustomHttp's metadata.uid, which the objects' ownerReference names;
	// empty (no ownerReference) for an object that is not in a cluster, such as a manifest
	// applied from a laptop before the object exists.
	OwnerUID string `json:"ownerUID,omitempty"`
}

// EnvRef is one envFrom source: Kind "ConfigMap" or "Secret", the Name of the object in the
// same namespace, and an optional Prefix for its keys.
type EnvRef struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Prefix string `json:"prefix,omitempty"`
}

// Kinds of envFrom sources.
const (
	EnvKindConfigMap = "ConfigMap"
	EnvKindSecret    = "Secret"
)

// MaxEnvFrom bounds spec.envFrom: each source is read on every reconcile.
const MaxEnvFrom = 16

// ConfigDigest is the SHA-256 (hex) of ConfigMapData in a stable key order: equal data, equal
// digest. Changing any key or value changes it.
func (d Desired) ConfigDigest() string {
	keys := make([]string, 0, len(d.ConfigMapData))
	for k := range d.ConfigMapData {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		// Length-prefixed, so that no two different maps hash the same bytes.
		fmt.Fprintf(h, "%d:%s%d:%s", len(k), k, len(d.ConfigMapData[k]), d.ConfigMapData[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// ConfigMapName is the name of the ConfigMap the stack owns: "<name>-configmap".
func (d Desired) ConfigMapName() string { return d.Name + ConfigMapSuffix }

// Resolve validates obj and returns its desired state with defaults applied. The error, when
// not nil, is an *InvalidSpecError listing every problem found, each naming the field and what
// to change; it means the object cannot be reconciled until its spec changes.
func Resolve(obj *KindCustomHttp) (Desired, error) {
	errs := Validate(obj)
	if len(errs) > 0 {
		return Desired{}, &InvalidSpecError{Errors: errs}
	}
	s := obj.Spec
	d := Desired{
		Namespace:     obj.Namespace,
		Name:          obj.Name,
		ReplicaCount:  *s.ReplicaCount,
		Port:          *s.Port,
		ContainerPort: DefaultContainerPort,
		Image:         s.Image,
		ServiceType:   s.ServiceType,

		RolloutOnConfigChange: s.RolloutOnConfigChange == nil || *s.RolloutOnConfigChange,
		OwnerUID:              string(obj.UID),
	}
	if s.ContainerPort != nil {
		d.ContainerPort = *s.ContainerPort
	}
	if d.Image == "" {
		d.Image = DefaultImage
	}
	if d.ServiceType == "" {
		d.ServiceType = DefaultServiceType
	}
	for _, e := range s.EnvFrom {
		if e.ConfigMapRef != nil {
			d.EnvFrom = append(d.EnvFrom, EnvRef{Kind: EnvKindConfigMap, Name: e.ConfigMapRef.Name, Prefix: e.Prefix})
		} else {
			d.EnvFrom = append(d.EnvFrom, EnvRef{Kind: EnvKindSecret, Name: e.SecretRef.Name, Prefix: e.Prefix})
		}
	}
	if len(s.ConfigMapData) > 0 {
		d.ConfigMapData = make(map[string]string, len(s.ConfigMapData))
		for k, v := range s.ConfigMapData {
			d.ConfigMapData[k] = v
		}
	}
	return d, nil
}

// Validate checks obj against the rules the CRD's OpenAPI schema also enforces at admission
// (config/crd), plus those the schema cannot express. It never panics on any input and
// returns nil when obj is valid.
func Validate(obj *KindCustomHttp) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	// The CR's name is also the Service's name, so it must be a DNS-1035 label (at most 63
	// characters, lower case, starting with a letter); the apiserver would reject the Service
	// otherwise, after the ConfigMap and Deployment already exist.
	if obj.Name == "" {
		errs = append(errs, field.Required(meta.Child("name"), "the object needs a name"))
	} else {
		for _, msg := range validation.IsDNS1035Label(obj.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), obj.Name,
				msg+" (the name is also the Service's name)"))
		}
	}
	if obj.Namespace == "" {
		errs = append(errs, field.Required(meta.Child("namespace"), "KindCustomHttp is namespaced: set metadata.namespace"))
	} else {
		for _, msg := range validation.IsDNS1123Label(obj.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), obj.Namespace, msg))
		}
	}

	spec := field.NewPath("spec")
	s := obj.Spec
	if s.ReplicaCount == nil {
		errs = append(errs, field.Required(spec.Child("replicaCount"), fmt.Sprintf("set the number of pods, 0 to %d", MaxReplicaCount)))
	} else if *s.ReplicaCount < 0 || *s.ReplicaCount > MaxReplicaCount {
		errs = append(errs, field.Invalid(spec.Child("replicaCount"), *s.ReplicaCount,
			fmt.Sprintf("must be between 0 and %d", MaxReplicaCount)))
	}
	if s.Port == nil {
		errs = append(errs, field.Required(spec.Child("port"), fmt.Sprintf("set the Service port, 1 to %d", MaxPort)))
	} else {
		errs = append(errs, validatePort(spec.Child("port"), *s.Port)...)
	}
	if s.ContainerPort != nil {
		errs = append(errs, validatePort(spec.Child("containerPort"), *s.ContainerPort)...)
	}
	// Characters, as the CRD's maxLength counts them; a value this long is not echoed back.
	if n := utf8.RuneCountInString(s.Image); n > MaxImageLength {
		errs = append(errs, tooLong(spec.Child("image"), fmt.Sprintf(
			"may not be more than %d characters (it has %d)", MaxImageLength, n)))
	} else if strings.TrimSpace(s.Image) != s.Image || strings.ContainsAny(s.Image, " \t\n\f\r") {
		// The set is RE2's \s, that of the CRD's pattern; TrimSpace adds the Unicode spaces a
		// copied reference may end with.
		errs = append(errs, field.Invalid(spec.Child("image"), s.Image, "an image reference has no white space"))
	}
	switch s.ServiceType {
	case "", ServiceTypeClusterIP, ServiceTypeNodePort, ServiceTypeLoadBalancer, ServiceTypeHeadless:
	default:
		errs = append(errs, field.NotSupported(spec.Child("serviceType"), s.ServiceType,
			[]string{string(ServiceTypeClusterIP), string(ServiceTypeNodePort), string(ServiceTypeLoadBalancer), string(ServiceTypeHeadless)}))
	}
	errs = append(errs, validateConfigMapData(spec.Child("configMapData"), s.ConfigMapData)...)
	errs = append(errs, validateEnvFrom(spec.Child("envFrom"), s.EnvFrom)...)
	return errs
}

func validateEnvFrom(p *field.Path, list []EnvFromSource) field.ErrorList {
	var errs field.ErrorList
	if len(list) > MaxEnvFrom {
		errs = append(errs, field.TooMany(p, len(list), MaxEnvFrom))
	}
	for i, e := range list {
		ip := p.Index(i)
		if (e.ConfigMapRef == nil) == (e.SecretRef == nil) {
			errs = append(errs, field.Invalid(ip, "", "set exactly one of configMapRef and secretRef"))
			continue
		}
		ref, rp := e.ConfigMapRef, ip.Child("configMapRef", "name")
		if ref == nil {
			ref, rp = e.SecretRef, ip.Child("secretRef", "name")
		}
		for _, msg := range validation.IsDNS1123Subdomain(ref.Name) {
			errs = append(errs, field.Invalid(rp, ref.Name, msg))
		}
		if e.Prefix != "" {
			for _, msg := range validation.IsEnvVarName(e.Prefix) {
				errs = append(errs, field.Invalid(ip.Child("prefix"), e.Prefix, msg))
			}
		}
	}
	return errs
}

func validatePort(p *field.Path, port int32) field.ErrorList {
	if port < 1 || port > MaxPort {
		return field.ErrorList{field.Invalid(p, port, fmt.Sprintf("must be between 1 and %d", MaxPort))}
	}
	return nil
}

// tooLong is a "Too long" error with detail as its message: field.TooLong's own says bytes
// where the CRD counts characters, and cannot say what to change.
func tooLong(p *field.Path, detail string) *field.Error {
	e := field.TooLong(p, nil, -1)
	e.Detail = detail
	return e
}

// validateConfigMapData applies the apiserver's own ConfigMap rules (validation.ValidateConfigMap:
// each key a file name under /config, at most 1 MiB of values in bytes) and MaxConfigMapDataKeys,
// in a stable order so messages do not flap. Over MaxConfigMapDataKeys keys it reports the
// count alone, so the message stays short whatever the map holds.
func validateConfigMapData(p *field.Path, data map[string]string) field.ErrorList {
	if len(data) > MaxConfigMapDataKeys {
		e := field.TooMany(p, len(data), MaxConfigMapDataKeys)
		e.Detail = fmt.Sprintf("may have at most %d keys (each key is a file under %s)", MaxConfigMapDataKeys, ConfigMountPath)
		return field.ErrorList{e}
	}
	var errs field.ErrorList
	keys := make([]string, 0, len(data))
	size := 0
	for k, v := range data {
		keys = append(keys, k)
		size += len(v)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, msg := range validation.IsConfigMapKey(k) {
			// A key over the length limit is shown by its start, so that the message stays short
			// whatever the key (it is in the message twice, as path and as value).
			shown := k
			if len(shown) > MaxConfigMapKeyLength {
				shown = shown[:64] + "..."
			}
			errs = append(errs, field.Invalid(p.Key(shown), shown, msg+" (each key becomes a file name under "+ConfigMountPath+")"))
		}
	}
	if size > MaxConfigMapDataBytes {
		errs = append(errs, tooLong(p, fmt.Sprintf(
			"the values may hold at most %d bytes (1 MiB) in all, the limit of a ConfigMap; they hold %d",
			MaxConfigMapDataBytes, size)))
	}
	return errs
}

// InvalidSpecError says a KindCustomHttp cannot be reconciled as written. Its message lists
// every problem; the watcher puts it into the Stalled condition and does not retry until the
// spec changes.
type InvalidSpecError struct {
	Errors field.ErrorList
}

func (e *InvalidSpecError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, err := range e.Errors {
		msgs[i] = err.Error()
	}
	return "invalid KindCustomHttp: " + strings.Join(msgs, "; ")
}
