// Package program is the operator binary's second mode: the project's Pulumi program, as the
// Pulumi engine runs it for the plain `pulumi` CLI (`pulumi preview`, `up`, `refresh`, ...).
// Pulumi.yaml names the binary (`runtime: {name: go, options: {binary: ...}}`); the Go
// language host starts it with no arguments and the engine's settings in the environment
// (Started), and it runs infra.Program for the stack's KindCustomHttp: the same program, with
// the same inputs, that the operator runs through the Automation API, so that the three
// users (watch, laptop, CI) see one truth.
//
// Which KindCustomHttp (Source): the stack's config `<project>:manifest`, a YAML file holding
// it (relative to the project directory), or else the live object read from the cluster by
// the namespace and name the stack's name encodes (stack.Name), with kubeconfig and context
// found as kubectl finds them. envFrom sources are read from the cluster in both cases
// (desired.Digest), as the operator does.
package program

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi/config"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// engineEnv are the variables the Go language host (v3.255.0) sets for the program and
// pulumi.Run requires: the engine's and resource monitor's gRPC addresses, project and stack.
var engineEnv = []string{"PULUMI_MONITOR", "PULUMI_ENGINE", "PULUMI_PROJECT", "PULUMI_STACK"}

// Started reports whether the Pulumi engine started this process: no arguments (args is
// os.Args, the program name first) and every engineEnv variable non-empty in getenv. A
// person's command always has arguments, so it is never taken for the engine's.
func Started(args []string, getenv func(string) string) bool {
	if len(args) > 1 {
		return false
	}
	for _, k := range engineEnv {
		if getenv(k) == "" {
			return false
		}
	}
	return true
}

// Main runs the program (Run) and, after an update, waits for the Deployment's rollout, as the
// Kubernetes provider's await would: the program declares it with pulumi.com/skipAwait (the
// operator watches rollouts without holding a worker; infra.Declare), so a person's `pulumi up`
// waits here instead, once Pulumi has applied every object, up to the stack's rolloutTimeout
// config (default rollout.DefaultTimeout; 0 does not wait). A failed program, or a rollout that
// does not finish, prints the error and exits 1: the engine reports the update as failed.
func Main() {
	var d api.Desired
	var timeout time.Duration
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		var err error
		if d, timeout, err = Run(ctx); err != nil {
			return err
		}
		if ctx.DryRun() {
			timeout = 0 // a preview applies nothing to wait for
		}
		return nil
	})
	if err == nil && timeout > 0 {
		err = waitRollout(d, timeout, kubeFromEnv)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

// ManifestKey is the stack config key, in the project's namespace, that names the manifest:
// `pulumi config set manifest FILE` (the CLI adds the project: `kindcustomhttp:manifest`).
const ManifestKey = "manifest"

// RolloutTimeoutKey is the stack config key of how long `pulumi up` waits for the Deployment's
// rollout after the update (a Go duration, "5m"; "0" does not wait): `pulumi config set
// rolloutTimeout 5m`.
const RolloutTimeoutKey = "rolloutTimeout"

// Run is the program: the checks, the object, then infra.Declare of its Desired. It returns the
// Desired and how long Main is to wait for its rollout. Errors say what to set; they come
// before any resource is registered, so nothing is changed.
func Run(ctx *pulumi.Context) (api.Desired, time.Duration, error) {
	if err := checkProviderEnv(os.Getenv); err != nil {
		return api.Desired{}, 0, err
	}
	timeout := rollout.DefaultTimeout
	if v := config.Get(ctx, ctx.Project()+":"+RolloutTimeoutKey); v != "" {
		t, err := time.ParseDuration(v)
		if err != nil || t < 0 {
			return api.Desired{}, 0, fmt.Errorf("config %s %q: want a duration such as 5m, or 0 not to wait for the rollout", RolloutTimeoutKey, v)
		}
		timeout = t
	}
	src := Source{
		Stack:    ctx.Stack(),
		Manifest: config.Get(ctx, ctx.Project()+":"+ManifestKey),
		Root:     ctx.RootDirectory(),
	}
	d, err := src.Desired(ctx.Context(), kubeFromEnv)
	if err != nil {
		return d, 0, err
	}
	_, err = infra.Declare(ctx, d)
	return d, timeout, err
}

// waitRollout waits up to timeout for d's Deployment to roll out (rollout.Wait), telling the
// person at the terminal what it waits for.
func waitRollout(d api.Desired, timeout time.Duration, connect func() (Kube, error)) error {
	k, err := connect()
	if err != nil {
		return fmt.Errorf("wait for the rollout of Deployment %s/%s: %w", d.Namespace, d.Name, err)
	}
	return rollout.Wait(context.Background(), k.Core, d.Namespace, d.Name, d.ReplicaCount, timeout, func(h rollout.Health) {
		if !h.Done {
			fmt.Fprintf(os.Stderr, "waiting for Deployment %s/%s to roll out: %s: %s\n", d.Namespace, d.Name, h.Reason, h.Message)
		}
	})
}

// checkProviderEnv makes sure the Kubernetes provider runs as the operator runs it
// (infra.ProviderEnv): the engine starts the provider with the CLI's environment, which the
// program inherits through the language host, so the program sees what the provider will.
func checkProviderEnv(getenv func(string) string) error {
	var missing []string
	for k, v := range infra.ProviderEnv() {
		if getenv(k) != v {
			missing = append(missing, k+"="+v)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the Kubernetes provider must run as the operator runs it: export %s before running pulumi (without it a configMapData change replaces the ConfigMap instead of updating it)",
			strings.Join(missing, " "))
	}
	return nil
}

// Kube are the clients Source needs from the cluster.
type Kube struct {
	Dynamic dynamic.Interface
	Core    kubeclient.Interface
}

// kubeFromEnv connects as kubectl does: KUBECONFIG or ~/.kube/config and its current context,
// else the in-cluster config.
func kubeFromEnv() (Kube, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return Kube{}, fmt.Errorf("load Kubernetes client config (set KUBECONFIG or a current context, as for kubectl): %w", err)
	}
	return kubeFor(rc)
}

func kubeFor(rc *rest.Config) (Kube, error) {
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "pulumi-operator-program"
	d, err := dynamic.NewForConfig(rc)
	if err != nil {
		return Kube{}, err
	}
	k, err := kubeclient.NewForConfig(rc)
	if err != nil {
		return Kube{}, err
	}
	return Kube{Dynamic: d, Core: k}, nil
}

// Source says where the program finds its KindCustomHttp.
type Source struct {
	// Stack is the stack's name; Manifest the config's manifest path ("" when unset); Root
	// the project directory, which a relative Manifest is taken from.
	Stack, Manifest, Root string
}

// Desired is the object's desired state, as the operator computes it (api.Resolve, and the
// envFrom digest from the cluster). connect is called when the cluster is needed: no manifest,
// an object with envFrom, or a manifest whose object's UID (the owner its objects name) may be
// in the cluster; that last lookup is best effort. Errors name what is wrong and what to set: a manifest
// that cannot be read or holds not exactly one KindCustomHttp, a manifest for another object
// than the stack's, a stack name that encodes no object (with no manifest), an object not in
// the cluster.
func (s Source) Desired(ctx context.Context, connect func() (Kube, error)) (api.Desired, error) {
	var kube *Kube
	cluster := func() (Kube, error) {
		if kube == nil {
			k, err := connect()
			if err != nil {
				return Kube{}, err
			}
			kube = &k
		}
		return *kube, nil
	}
	ns, name, encoded := objectOf(s.Stack)
	var obj *api.KindCustomHttp
	if s.Manifest != "" {
		path := s.Manifest
		if !filepath.IsAbs(path) {
			path = filepath.Join(s.Root, path)
		}
		docs, err := api.LoadDocuments([]string{path}, api.LoadOptions{})
		if err != nil {
			return api.Desired{}, fmt.Errorf("config %s: %w", ManifestKey, err)
		}
		if len(docs) != 1 {
			return api.Desired{}, fmt.Errorf("config %s: %s holds %d KindCustomHttp objects; a stack is one object: name a file with only it", ManifestKey, s.Manifest, len(docs))
		}
		obj = docs[0].Object
		if encoded && (obj.Namespace != ns || obj.Name != name) {
			return api.Desired{}, fmt.Errorf("config %s: %s is KindCustomHttp %s/%s, but stack %s belongs to %s/%s: name that object's manifest, or use the stack of %s/%s",
				ManifestKey, s.Manifest, obj.Namespace, obj.Name, s.Stack, ns, name, obj.Namespace, obj.Name)
		}
		if obj.UID == "" {
			// The live object's UID, best effort, so that the objects name the same owner
			// as the operator's up gives them (infra.Declare); no cluster, no owner.
			if k, err := cluster(); err == nil {
				if u, err := k.Dynamic.Resource(api.GroupVersionResource).Namespace(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{}); err == nil {
					obj.UID = u.GetUID()
				}
			}
		}
	} else {
		if !encoded {
			return api.Desired{}, fmt.Errorf("stack %s names no KindCustomHttp (the operator's stacks are <cluster>.<namespace>.<name>): set its manifest with `pulumi config set %s FILE`", s.Stack, ManifestKey)
		}
		k, err := cluster()
		if err != nil {
			return api.Desired{}, err
		}
		u, err := k.Dynamic.Resource(api.GroupVersionResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return api.Desired{}, fmt.Errorf("stack %s belongs to KindCustomHttp %s/%s, which is not in the cluster of the current kubeconfig context: check the context, or set a manifest with `pulumi config set %s FILE`", s.Stack, ns, name, ManifestKey)
		}
		if err != nil {
			return api.Desired{}, fmt.Errorf("read KindCustomHttp %s/%s of stack %s: %w", ns, name, s.Stack, err)
		}
		if obj, err = api.FromUnstructured(u); err != nil {
			return api.Desired{}, err
		}
	}
	// The resolver the watcher and the commands use (desired.Resolve), with the key they use
	// (the same passphrase, or the key file --env-digest-key-file names, in the environment).
	key, err := desired.LoadKey(os.Getenv(desired.KeyFileEnv), os.LookupEnv)
	if err != nil && len(obj.Spec.EnvFrom) > 0 {
		return api.Desired{}, err
	}
	r, err := desired.Resolve(ctx, obj, func() (kubeclient.Interface, error) {
		k, err := cluster()
		return k.Core, err
	}, desired.Options{SkipForbidden: true, Key: key})
	return r.Desired, err
}

// objectOf is the namespace and name a stack name encodes (stack.Name: <cluster>.<namespace>.
// <name>); ok is false for any other name, a name stack.Name shortened among them (a long
// namespace and name, cut and ended with '_' and a hash, which no object's name holds): the
// caller then asks for a manifest.
func objectOf(stackName string) (ns, name string, ok bool) {
	parts := strings.Split(stackName, ".")
	if len(parts) != 3 {
		return "", "", false
	}
	again, err := stack.Name(parts[0], parts[1], parts[2])
	if err != nil || again != stackName {
		return "", "", false
	}
	return parts[1], parts[2], true
}
