package commands

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/desired"
	"github.com/pulumi-operator/pulumi-operator/internal/kubeclient"
	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
	"github.com/pulumi-operator/pulumi-operator/ownership"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// lockPoll is how often an operation waiting for a stack's lock (--wait-for-lock) retries.
const lockPoll = 2 * time.Second

// runObjects loads the objects (all of them, before any Pulumi run, so bad input writes
// nothing), then runs op on each object's stack in turn and reports (report). Bad input exits
// ExitInvalidInput; envFrom sources that cannot be read exit ExitFailed. SIGINT or SIGTERM
// cancels the running operation as pulumi cancels one (the Automation API's command sends
// the CLI SIGINT: it finishes the steps under way, saves the state and releases the lock),
// runs no later object, reports what ran and exits ExitCancelled; a second signal ends this
// process at once.
func runObjects(c *cli.Context, cfg *config, of *objectFlags, op Operation) error {
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // the default action again for a second signal, like pulumi's second ^C
	}()
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("unexpected argument %q: name files with -f", c.Args().First()), ExitInvalidInput)
	}
	if of.parallel < 1 && op.manyObjects() {
		return cli.Exit(fmt.Sprintf("--parallel %d: want at least 1", of.parallel), ExitInvalidInput)
	}
	if op == Destroy && !of.yes {
		return cli.Exit("destroy deletes the objects of the stack: pass --yes to confirm", ExitInvalidInput)
	}
	var client dynamic.Interface
	var kube kubeclient.Interface
	needCluster := of.fromCluster != "" || of.all || cfg.clusterName == "" || (op == Up && of.rolloutTimeout > 0)
	rc, rcErr := restConfig(cfg)
	if needCluster && rcErr != nil {
		return cli.Exit(rcErr.Error(), ExitInvalidInput)
	}
	if rcErr == nil {
		var err error
		if client, err = dynamic.NewForConfig(rc); err != nil {
			return err
		}
		if kube, err = kubeclient.NewForConfig(rc); err != nil {
			return err
		}
	}
	of.namespaceGiven = of.namespace != ""
	if of.namespace == "" {
		of.namespace = contextNamespace(cfg)
	}
	docs, err := loadObjects(ctx, of, client)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	ownerUIDs(ctx, client, docs)
	if err := envDigests(ctx, cfg, docs); err != nil {
		var invalid *api.InvalidSpecError
		if errors.As(err, &invalid) {
			return cli.Exit(err.Error(), ExitInvalidInput)
		}
		return cli.Exit(err.Error(), ExitFailed)
	}
	if !op.manyObjects() && len(docs) != 1 {
		return cli.Exit(fmt.Sprintf("%s works on one KindCustomHttp at a time; the input has %d", op, len(docs)), ExitInvalidInput)
	}
	mgr, _, err := newStackManager(ctx, cfg, client)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	out, progress := c.App.Writer, c.App.Writer
	if of.jsonOut {
		progress = c.App.ErrWriter
	}
	terminal := false
	if f, ok := progress.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		terminal = true
	}
	results := runAll(ctx, mgr, kube, docs, op, of, progress, terminal)
	err = report(out, of, op, results)
	if ctx.Err() != nil {
		msg := fmt.Sprintf("%s interrupted: %d of %d objects ran or were cancelled (see the table)", op, len(results), len(docs))
		if err != nil {
			msg += "; " + err.Error()
		}
		return cli.Exit(msg, ExitCancelled)
	}
	return err
}

// runAll runs op on every document's stack (runOne), --parallel at a time, and returns the
// results in the documents' order; once ctx ends it starts no more (the results stop at the
// first document not started). With several documents each one's start is announced as
// "[i/N] op object (stack ...)". One at a time, each run's progress goes to progress as it
// happens: Pulumi's own display on a terminal (terminal), plain lines otherwise; a preview's,
// which is kept for the diff, is shown as it goes on a terminal and only at the end
// elsewhere (report). Several at a time, each run's output is held and printed as one block
// when it ends, so that runs do not interleave.
func runAll(ctx context.Context, mgr *stack.Manager, kube kubeclient.Interface, docs []api.Document, op Operation, of *objectFlags, progress io.Writer, terminal bool) []result {
	parallel := max(of.parallel, 1)
	results := make([]result, len(docs))
	started := make([]bool, len(docs))
	var mu sync.Mutex // serializes writes to progress
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(progress, format, args...)
	}
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, d := range docs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		started[i] = true
		if len(docs) > 1 {
			name, _ := mgr.StackName(d.Desired.Namespace, d.Desired.Name)
			say("[%d/%d] %s %s/%s (stack %s)\n", i+1, len(docs), op, d.Desired.Namespace, d.Desired.Name, mgr.QualifiedName(name))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if parallel == 1 {
				color := "never"
				if terminal {
					color = "auto" // Pulumi's own interactive display
				}
				results[i] = runOne(ctx, mgr, kube, d, op, of, progress, color, terminal)
				return
			}
			var held bytes.Buffer
			results[i] = runOne(ctx, mgr, kube, d, op, of, &held, "never", false)
			say("--- %s %s: %s\n%s", op, results[i].Object, resultWord(results[i]), held.String())
		}()
		if parallel == 1 {
			wg.Wait()
		}
	}
	wg.Wait()
	n := 0
	for n < len(docs) && started[n] {
		n++
	}
	return results[:n]
}

// runOne runs op on d's stack, waiting for a lock up to --wait-for-lock (retrying every
// lockPoll), and returns its result; the error is in result.err. A lock whose pulumi process
// is gone from this host (killed, or interrupted too early to release it) is removed once,
// with a warning, and the operation run again, as the watcher does (stale locks). After a
// successful up it waits up to --rollout-timeout for the Deployment's rollout through kube
// (waitRollout).
func runOne(ctx context.Context, mgr *stack.Manager, kube kubeclient.Interface, d api.Document, op Operation, of *objectFlags, progress io.Writer, color string, streamPreview bool) result {
	name, _ := mgr.StackName(d.Desired.Namespace, d.Desired.Name)
	r := result{Object: d.Desired.Namespace + "/" + d.Desired.Name, Stack: mgr.QualifiedName(name), Operation: op}
	opts := stack.RunOptions{Diff: of.diff, Color: color, Progress: progress}
	var diff bytes.Buffer
	if op == Preview {
		// The preview's own output is kept for the diff (report shows it with --diff, or when
		// --expect-no-changes fails) and, with streamPreview, shown as it goes.
		opts.Progress, opts.Diff, opts.Color = &diff, true, "never"
		if streamPreview {
			opts.Progress = io.MultiWriter(&diff, progress)
			r.streamed = true
		}
	}
	deadline := time.Now().Add(of.waitForLock)
	cleared := false
	if op == Preview && kube != nil {
		// What the operator in the cluster would take over (a preview may lack the read).
		if orig, err := ownership.FindOriginal(ctx, kube, d.Desired); err != nil {
			fmt.Fprintf(progress, "warning: %s: could not look for the original operator's objects: %v\n", r.Object, err)
		} else {
			r.Adopts = orig.Names()
		}
	}
	if op == Up && kube != nil {
		// The provider upserts (see ownership): never over somebody else's object.
		if err := ownership.Check(ctx, kube, d.Desired); err != nil {
			r.err, r.Error = err, err.Error()
			return r
		}
	}
	for {
		diff.Reset()
		res, err := op.run(ctx, mgr, name, d.Desired, opts)
		if who, ids, all := deadOwners(mgr, name, err); !cleared && len(ids) > 0 && ctx.Err() == nil {
			// Nobody will release this lock: its pulumi process, one of this command's state
			// directory, is gone (stack.Manager.HolderGone).
			cleared = true
			if cerr := mgr.CancelLock(ctx, name, ids, all); cerr != nil {
				fmt.Fprintf(progress, "warning: stack %s: could not remove the lock left by %s: %v\n", name, who, cerr)
			} else {
				fmt.Fprintf(progress, "warning: stack %s: removed the lock left by %s, which has ended\n", name, who)
				continue
			}
		}
		if errors.Is(err, stack.ErrLocked) && time.Now().Before(deadline) {
			fmt.Fprintf(progress, "stack %s is locked by another update; waiting (until %s)\n", name, deadline.Format(time.TimeOnly))
			select {
			case <-time.After(lockPoll):
				continue
			case <-ctx.Done():
			}
		}
		for _, line := range res.Recovered {
			fmt.Fprintf(progress, "warning: stack %s: an interrupted update had left a pending operation: %s\n", name, line)
		}
		if err == nil && op == Up && of.rolloutTimeout > 0 && kube != nil {
			err = waitRollout(ctx, kube, d.Desired, of.rolloutTimeout, progress)
		}
		r.Changes, r.Outputs, r.diff, r.err = res.Changes, res.Outputs, diff.String(), err
		if err != nil {
			r.Error = err.Error()
			if errors.Is(err, stack.ErrLocked) {
				r.Error = lockMessage(name, err, of.waitForLock)
			}
		}
		return r
	}
}

// waitRollout waits up to timeout for d's Deployment to roll out (rollout.Wait), printing each
// new reason to progress, as the Kubernetes provider's await of `pulumi up` reports its
// Deployment: the operator's program does not await it (infra.SkipAwait), so that no rollout
// holds a worker of the operator, and a person's `up` waits here instead.
func waitRollout(ctx context.Context, kube kubeclient.Interface, d api.Desired, timeout time.Duration, progress io.Writer) error {
	return rollout.Wait(ctx, kube, d.Namespace, d.Name, d.ReplicaCount, timeout, func(h rollout.Health) {
		if h.Done {
			fmt.Fprintf(progress, "Deployment %s/%s rolled out: %s\n", d.Namespace, d.Name, h.Message)
			return
		}
		fmt.Fprintf(progress, "waiting for Deployment %s/%s to roll out: %s: %s\n", d.Namespace, d.Name, h.Reason, h.Message)
	})
}

// ownerUIDs fills in the UID of each document's object read from a file (Desired.OwnerUID once
// resolved) from the live object of the same namespace and name, so that an up from a file
// declares the ownerReference the operator's up declares and neither undoes the other's. Best effort: without client (no
// cluster configured) or for an object not in the cluster there is no owner to name.
func ownerUIDs(ctx context.Context, client dynamic.Interface, docs []api.Document) {
	if client == nil {
		return
	}
	for i := range docs {
		obj := docs[i].Object
		if obj.UID != "" {
			continue
		}
		u, err := client.Resource(api.GroupVersionResource).Namespace(obj.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
		if err == nil {
			obj.UID = u.GetUID()
		}
	}
}

// deadOwners describes the locks of a stack.ErrLocked err of stack name when every one was left
// by a pulumi process of this state directory that has ended (stack.Manager.HolderGone), as
// "user@host (pid N)", with their IDs and every lock err reported; else, and for any other err,
// it is empty.
func deadOwners(mgr *stack.Manager, name string, err error) (who string, ids []string, all []stack.Lock) {
	var oe *stack.OperationError
	if !errors.Is(err, stack.ErrLocked) || !errors.As(err, &oe) || len(oe.Locks) == 0 {
		return "", nil, nil
	}
	var names []string
	for _, l := range oe.Locks {
		if gone, _, _ := mgr.HolderGone(l, name); !gone || l.ID == "" {
			return "", nil, nil
		}
		names = append(names, fmt.Sprintf("%s@%s (pid %d)", l.User, l.Host, l.Pid))
		ids = append(ids, l.ID)
	}
	return strings.Join(names, ", "), ids, oe.Locks
}

// lockMessage says who holds the lock of stack name (from a *stack.OperationError in err,
// else "another update") and what to do, or how long the command waited.
func lockMessage(name string, err error, waited time.Duration) string {
	var oe *stack.OperationError
	who := "another update"
	if errors.As(err, &oe) && len(oe.Locks) > 0 {
		l := oe.Locks[0]
		who = fmt.Sprintf("%s@%s (pid %d) since %s", l.User, l.Host, l.Pid, l.Created.Format(time.RFC3339))
	}
	if waited > 0 {
		return fmt.Sprintf("stack %s is still locked by %s after waiting %s", name, who, waited)
	}
	return fmt.Sprintf("stack %s is locked by %s: retry later, or pass --wait-for-lock 5m", name, who)
}

// envDigests resolves each document's object with desired.Resolve, the resolver the watcher
// uses too, so that an up from the command line applies the same pod template: Desired gets
// the digest of the object's envFrom sources, read from the cluster (connected only for an
// object that has some). Errors name the document.
func envDigests(ctx context.Context, cfg *config, docs []api.Document) error {
	var kube kubeclient.Interface
	cluster := func() (kubeclient.Interface, error) {
		if kube == nil {
			rc, err := restConfig(cfg)
			if err != nil {
				return nil, err
			}
			if kube, err = kubeclient.NewForConfig(rc); err != nil {
				return nil, err
			}
		}
		return kube, nil
	}
	key, keyErr := desired.LoadKey(cfg.envDigestKeyFile, os.LookupEnv)
	for i := range docs {
		if keyErr != nil && len(docs[i].Object.Spec.EnvFrom) > 0 {
			return fmt.Errorf("%s: %w", docs[i].Where(), keyErr)
		}
		r, err := desired.Resolve(ctx, docs[i].Object, cluster, desired.Options{SkipForbidden: true, Key: key})
		if err != nil {
			return fmt.Errorf("%s: %w", docs[i].Where(), err)
		}
		docs[i].Desired = r.Desired
	}
	return nil
}
