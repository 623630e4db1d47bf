package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/urfave/cli/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// rotateFlags are rotate-passphrase's own flags.
type rotateFlags struct {
	direct, check bool
	wait          time.Duration
	poll          time.Duration
}

// rotatePassphraseCommand is `rotate-passphrase`: re-encrypt every stack of the backend under the
// current passphrase, without an outage.
func rotatePassphraseCommand(cfg *config) *cli.Command {
	rf := &rotateFlags{poll: 2 * time.Second}
	return &cli.Command{
		Name:  "rotate-passphrase",
		Usage: "re-encrypt every stack of the backend under the current passphrase, from --previous-passphrase-file",
		Description: "The flow, with the operator serving throughout (README \"Security\"):\n" +
			"  1. give the operator the new passphrase as its passphrase and the old one as\n" +
			"     --previous-passphrase-file (chart: passphraseRotation); it then re-encrypts each stack\n" +
			"     it updates before the update, and still opens every stack;\n" +
			"  2. run this command with the same two passphrases: it asks the operator to reconcile each\n" +
			"     object whose stack still needs the old passphrase (" + api.ReconcileRequestAnnotation + "),\n" +
			"     and waits until none does. Each stack is re-encrypted in one write of the backend: a\n" +
			"     crash or a kill anywhere leaves it under the old passphrase or the new one, and running\n" +
			"     this again finishes the rest;\n" +
			"  3. remove the old passphrase.\n" +
			"With --direct it re-encrypts here instead (only while no operator updates these stacks);\n" +
			"with --check it only reports.\n" +
			fmt.Sprintf("Exits 0 when every stack opens with the current passphrase, %d when --wait ran out, %d when a\n", ExitTimeout, ExitFailed) +
			"stack opens with neither.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "direct", Destination: &rf.direct,
				Usage: "re-encrypt here rather than through the operator (stop the operator first)"},
			&cli.BoolFlag{Name: "check", Destination: &rf.check, Usage: "only report which passphrase opens each stack"},
			&cli.DurationFlag{Name: "wait", Value: 10 * time.Minute, Destination: &rf.wait,
				Usage: "give up after `DURATION` when stacks still need the previous passphrase"},
		},
		Action: func(c *cli.Context) error { return runRotate(c, cfg, rf) },
	}
}

// runRotate lists the backend's stacks, re-encrypts (--direct) or requests the re-encryption of
// those the previous passphrase still opens, and waits until none is left.
func runRotate(c *cli.Context, cfg *config, rf *rotateFlags) error {
	if cfg.previousPhrase == "" && !rf.check {
		return cli.Exit("rotate-passphrase needs the passphrase the stacks have now: --previous-passphrase-file (PULUMI_OPERATOR_PREVIOUS_PASSPHRASE_FILE); the new one is the passphrase (PULUMI_CONFIG_PASSPHRASE[_FILE])", ExitInvalidInput)
	}
	var client dynamic.Interface
	if !rf.direct && !rf.check {
		rc, err := restConfig(cfg)
		if err != nil {
			return cli.Exit(err.Error(), ExitInvalidInput)
		}
		if client, err = dynamic.NewForConfig(rc); err != nil {
			return err
		}
	}
	if client == nil && cfg.clusterName == "" {
		cfg.clusterName = "rotate" // --direct, --check: every stack of the backend, by its own name
	}
	ctx := c.Context
	mgr, _, err := newStackManager(ctx, cfg, client)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	all, err := mgr.ListStacks(ctx)
	if err != nil {
		return err
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	list := all
	if client != nil {
		// Through the operator: only this cluster's stacks have their objects here.
		list = nil
		for _, s := range all {
			if s.Cluster == cfg.clusterName {
				list = append(list, s)
			} else {
				fmt.Fprintf(c.App.Writer, "%s: not this cluster's (%s): skipped (rotate it from its cluster, or with --direct)\n", s.Name, cfg.clusterName)
			}
		}
	}
	out := c.App.Writer
	pending, err := stacksNeedingPrevious(ctx, mgr, list, out)
	if err != nil || rf.check {
		return err
	}
	for _, s := range pending {
		if rf.direct {
			if _, err := mgr.Reencrypt(ctx, s.Name); err != nil {
				return cli.Exit(err.Error(), ExitFailed)
			}
			fmt.Fprintf(out, "%s: re-encrypted\n", s.Name)
			continue
		}
		if err := requestReconcile(ctx, client, s); err != nil {
			return cli.Exit(fmt.Sprintf("%s: %v", s.Name, err), ExitFailed)
		}
		fmt.Fprintf(out, "%s: asked the operator to reconcile %s/%s\n", s.Name, s.Namespace, s.CRName)
	}
	deadline := time.Now().Add(rf.wait)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			return cli.Exit(fmt.Sprintf("%d stacks still need the previous passphrase after --wait %s (is the operator running, with both passphrases?)", len(pending), rf.wait), ExitTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rf.poll):
		}
		if pending, err = stacksNeedingPrevious(ctx, mgr, pending, io.Discard); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "every stack (%d) opens with the current passphrase: the previous one can go\n", len(list))
	return nil
}

// stacksNeedingPrevious returns the stacks of list that only the previous passphrase opens,
// writing a line for each stack to out. A stack neither opens is an error (ExitFailed).
func stacksNeedingPrevious(ctx context.Context, mgr *stack.Manager, list []stack.StackInfo, out io.Writer) ([]stack.StackInfo, error) {
	var pending []stack.StackInfo
	for _, s := range list {
		state, err := mgr.PassphraseOf(ctx, s.Name)
		if errors.Is(err, stack.ErrIncorrectPassphrase) {
			return nil, cli.Exit(err.Error(), ExitFailed)
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(out, "%s: %s\n", s.Name, state)
		if state == stack.PassphrasePrevious {
			pending = append(pending, s)
		}
	}
	return pending, nil
}

// requestReconcile asks the operator to reconcile s's KindCustomHttp now (as `reconcile` does).
// Errors: a stack whose name does not say its object (rerun with --direct), an object that is
// gone (its stack is an orphan: --direct), the patch's.
func requestReconcile(ctx context.Context, client dynamic.Interface, s stack.StackInfo) error {
	if s.CRName == "" {
		return errors.New("its name does not say which KindCustomHttp it belongs to: re-encrypt it with --direct")
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, api.ReconcileRequestAnnotation, "rotate-passphrase "+time.Now().UTC().Format(time.RFC3339Nano))
	_, err := client.Resource(kindCustomHttps).Namespace(s.Namespace).Patch(ctx, s.CRName, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("KindCustomHttp %s/%s is not in this cluster: re-encrypt its stack with --direct", s.Namespace, s.CRName)
	}
	return err
}
