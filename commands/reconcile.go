package commands

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// reconcileFlags are reconcile's own flags.
type reconcileFlags struct {
	namespace string
	wait      bool
	timeout   time.Duration
}

// reconcileCommand is `reconcile NAME`: Flux's `flux reconcile` for a KindCustomHttp.
func reconcileCommand(cfg *config) *cli.Command {
	rf := &reconcileFlags{}
	return &cli.Command{
		Name:      "reconcile",
		Usage:     "ask the watcher to reconcile a KindCustomHttp now: refresh its stack, then up",
		ArgsUsage: "NAME",
		Description: "Sets the " + api.ReconcileRequestAnnotation + " annotation to the current time, as\n" +
			"`flux reconcile` sets reconcile.fluxcd.io/requestedAt; the watcher in the cluster handles it\n" +
			"and echoes the value in status.lastHandledReconcileAt, whatever the outcome. With --wait, waits\n" +
			fmt.Sprintf("for that and exits 0 when the object is Ready, %d when the up (or a check before it) failed,\n", ExitFailed) +
			fmt.Sprintf("%d when the object is suspended, %d when --timeout ran out.\n", ExitInvalidInput, ExitTimeout) +
			"Flags may follow NAME.\nExamples:\n" +
			"  pulumi-operator reconcile web -n shop --wait",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, Destination: &rf.namespace,
				Usage: "`NAMESPACE` of the object (default: the kubeconfig context's, else default)"},
			&cli.BoolFlag{Name: "wait", Aliases: []string{"w"}, Destination: &rf.wait,
				Usage: "wait until the watcher has handled the request, and exit by its result"},
			&cli.DurationFlag{Name: "timeout", Value: 5 * time.Minute, Destination: &rf.timeout,
				Usage: "with --wait, give up after `DURATION`"},
		},
		Action: func(c *cli.Context) error { return runReconcile(c, cfg, rf) },
	}
}

// parseAfterName parses the flags that follow NAME (`reconcile web -n shop --wait`, as
// kubectl and flux take them). urfave/cli v2 stops parsing at the first argument and leaves
// the rest as arguments, so this parses them again with the standard library's flag package,
// setting only what they name. Errors: an unknown flag, a bad value, a second argument.
func (rf *reconcileFlags) parseAfterName(args []string) error {
	fs := flag.NewFlagSet("reconcile", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ns := fs.String("namespace", rf.namespace, "")
	fs.StringVar(ns, "n", rf.namespace, "")
	wait := fs.Bool("wait", rf.wait, "")
	fs.BoolVar(wait, "w", rf.wait, "")
	timeout := fs.Duration("timeout", rf.timeout, "")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("reconcile NAME: %v", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("reconcile takes one NAME; unexpected %q", fs.Arg(0))
	}
	rf.namespace, rf.wait, rf.timeout = *ns, *wait, *timeout
	return nil
}

// kindCustomHttps is the resource of the KindCustomHttp API.
var kindCustomHttps = api.GroupVersion.WithResource("kindcustomhttps")

// runReconcile requests the reconcile (a merge patch of the annotation) and, with --wait,
// waits for its result (waitHandled). Errors: no NAME, an object that does not exist or is
// suspended, before the request or by the time the watcher handles it (ExitInvalidInput); a
// failed up, or a failure the watcher found before it (ExitFailed); no result in time
// (ExitTimeout).
func runReconcile(c *cli.Context, cfg *config, rf *reconcileFlags) error {
	if c.NArg() > 1 {
		if err := rf.parseAfterName(c.Args().Tail()); err != nil {
			return cli.Exit(err.Error(), ExitInvalidInput)
		}
	}
	if c.NArg() == 0 {
		return cli.Exit("reconcile takes one argument, the KindCustomHttp's NAME", ExitInvalidInput)
	}
	name := c.Args().First()
	ns := rf.namespace
	if ns == "" {
		ns = contextNamespace(cfg)
	}
	rc, err := restConfig(cfg)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	client, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx := c.Context
	res := client.Resource(kindCustomHttps).Namespace(ns)
	obj, err := res.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return cli.Exit(fmt.Sprintf("KindCustomHttp %s/%s not found (is -n right?)", ns, name), ExitInvalidInput)
	}
	if err != nil {
		return fmt.Errorf("read KindCustomHttp %s/%s: %w", ns, name, err)
	}
	if suspended, _, _ := unstructured.NestedBool(obj.Object, "spec", "suspend"); suspended {
		return cli.Exit(fmt.Sprintf("KindCustomHttp %s/%s is suspended (spec.suspend): the watcher runs nothing for it until it is false", ns, name), ExitInvalidInput)
	}
	requested := time.Now().UTC().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.ReconcileRequestAnnotation, requested)
	if _, err := res.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("annotate KindCustomHttp %s/%s: %w", ns, name, err)
	}
	fmt.Fprintf(c.App.Writer, "requested a reconcile of %s/%s (%s=%s)\n", ns, name, api.ReconcileRequestAnnotation, requested)
	if !rf.wait {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, rf.timeout)
	defer cancel()
	msg, err := waitHandled(wctx, res, name, requested)
	switch {
	case errors.Is(err, wait.ErrWaitTimeout), wctx.Err() != nil && ctx.Err() == nil:
		return cli.Exit(fmt.Sprintf("KindCustomHttp %s/%s: no result within --timeout %s (is the watcher running?)", ns, name, rf.timeout), ExitTimeout)
	case err != nil:
		return err
	}
	fmt.Fprintf(c.App.Writer, "%s/%s: %s\n", ns, name, msg)
	return nil
}

// errUpFailed is the up that handled a reconcile request failing, or a failure before the up
// (an invalid spec, a missing envFrom source, an object conflict) that the watcher reported as
// the request's outcome.
var errUpFailed = errors.New("up failed")

// errSuspended is a reconcile request the watcher handled by running nothing: the object was
// suspended (spec.suspend) after the request was made.
var errSuspended = errors.New("suspended (spec.suspend): the watcher ran nothing for the request")

// waitHandled watches the object (client-go's watchtools.UntilWithSync, as `kubectl wait`)
// until the watcher has handled the request: status.lastHandledReconcileAt is requested, the
// token the watcher echoes whether the up it ran for the request succeeded or failed (as Flux
// echoes reconcile.fluxcd.io/requestedAt). Then Ready True at the current generation is success
// (nil and a description); Stalled True, or Reconciling True with reason Retrying, is a failure
// (an error wrapping errUpFailed with the Ready condition's message); anything else (the
// replicas still rolling out) is waited for. Times play no part: a clock that differs between
// this machine and the cluster cannot mislead it. A deleted object is an error.
func waitHandled(ctx context.Context, res dynamic.ResourceInterface, name, requested string) (string, error) {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return res.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return res.Watch(ctx, o)
		},
	}
	var msg string
	var failed error
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(e watch.Event) (bool, error) {
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("KindCustomHttp %s was deleted while waiting", name)
		}
		u, ok := e.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		var cr api.KindCustomHttp
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cr); err != nil {
			return false, nil
		}
		if cr.Status.LastHandledReconcileAt != requested {
			return false, nil
		}
		msg, failed = handledOutcome(&cr)
		return msg != "" || failed != nil, nil
	})
	switch {
	case errors.Is(failed, errSuspended):
		return "", cli.Exit(fmt.Sprintf("KindCustomHttp %s is %v", name, failed), ExitInvalidInput)
	case failed != nil:
		return "", cli.Exit(failed.Error(), ExitFailed)
	}
	return msg, err
}

// handledOutcome reads the result of a handled reconcile request from cr's conditions: an
// error wrapping errSuspended when the object is suspended (Reconciling False, Suspended, at
// its generation: nothing ran), a description when it is Ready at its generation, an error
// wrapping errUpFailed when it failed (Stalled, or a failure being retried), and neither while
// it is still on its way.
func handledOutcome(cr *api.KindCustomHttp) (string, error) {
	reconciling := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionReconciling)
	if reconciling != nil && reconciling.Reason == api.ReasonSuspended && reconciling.ObservedGeneration == cr.Generation {
		return "", errSuspended
	}
	ready := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionReady)
	if ready == nil {
		return "", nil
	}
	stalled := meta.FindStatusCondition(cr.Status.Conditions, api.ConditionStalled)
	switch {
	case ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == cr.Generation:
		return fmt.Sprintf("reconciled: Ready (%s)", ready.Message), nil
	case stalled != nil && stalled.Status == metav1.ConditionTrue,
		reconciling != nil && reconciling.Status == metav1.ConditionTrue && reconciling.Reason == api.ReasonRetrying:
		return "", fmt.Errorf("%w: %s: %s", errUpFailed, ready.Reason, ready.Message)
	}
	return "", nil
}
