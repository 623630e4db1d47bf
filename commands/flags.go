package commands

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pulumi-operator/pulumi-operator/internal/rollout"
)

// objectFlags are the flags of up, preview, refresh, destroy and stacks: one set of values,
// since one command runs per process.
type objectFlags struct {
	files       cli.StringSlice
	fromCluster string
	// all is preview's --all: every KindCustomHttp of the cluster (of namespace when it was
	// given on the command line: namespaceGiven).
	all              bool
	namespaceGiven   bool
	namespace        string
	ignoreOtherKinds bool
	jsonOut          bool
	diff             bool
	waitForLock      time.Duration
	expectNoChanges  bool
	summaryMarkdown  string
	yes              bool
	parallel         int
	rolloutTimeout   time.Duration
}

// sourceFlags are the flags every object command has: where the objects come from, --json and
// --wait-for-lock. Each call returns new flags, so no two commands share a flag value.
func (of *objectFlags) sourceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, EnvVars: []string{"PULUMI_OPERATOR_FILES"}, Destination: &of.files,
			Usage: "KindCustomHttp `FILE` or directory of them (multi-document YAML); repeatable"},
		&cli.StringFlag{Name: "from-cluster", EnvVars: []string{"PULUMI_OPERATOR_FROM_CLUSTER"}, Destination: &of.fromCluster,
			Usage: "read the live object `NAMESPACE/NAME` from the cluster instead of a file"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, EnvVars: []string{"PULUMI_OPERATOR_NAMESPACE"}, Destination: &of.namespace,
			Usage: "`NAMESPACE` of documents that name none (default: the kubeconfig context's, else default)"},
		&cli.BoolFlag{Name: "ignore-other-kinds", EnvVars: []string{"PULUMI_OPERATOR_IGNORE_OTHER_KINDS"}, Destination: &of.ignoreOtherKinds,
			Usage: "skip documents that are not KindCustomHttp (default: they are errors)"},
		&cli.BoolFlag{Name: "json", EnvVars: []string{"PULUMI_OPERATOR_JSON"}, Destination: &of.jsonOut,
			Usage: "print results as JSON on stdout (progress goes to stderr)"},
		&cli.DurationFlag{Name: "wait-for-lock", EnvVars: []string{"PULUMI_OPERATOR_WAIT_FOR_LOCK"}, Destination: &of.waitForLock,
			Usage: "when another update holds a stack's lock, wait up to `DURATION` (default: exit " + fmt.Sprint(ExitTimeout) + " at once)"},
	}
}

// parallelFlag is --parallel, of up and preview.
func (of *objectFlags) parallelFlag() cli.Flag {
	return &cli.IntFlag{Name: "parallel", Aliases: []string{"p"}, EnvVars: []string{"PULUMI_OPERATOR_PARALLEL"}, Value: 1, Destination: &of.parallel,
		Usage: "run up to `N` objects' stacks at once (each runs one pulumi process and its provider plugin); their output is then printed per object as each ends"}
}

// rolloutFlag is --rollout-timeout, of up.
func (of *objectFlags) rolloutFlag() cli.Flag {
	return &cli.DurationFlag{Name: "rollout-timeout", EnvVars: []string{"PULUMI_OPERATOR_ROLLOUT_TIMEOUT"}, Value: rollout.DefaultTimeout, Destination: &of.rolloutTimeout,
		Usage: "after each up, wait up to `DURATION` for the Deployment's pods to be available, as `pulumi up` of the Kubernetes provider does (the up itself does not wait: the operator watches rollouts without holding a worker); 0 does not wait"}
}

// diffFlag is --diff, of up and preview.
func (of *objectFlags) diffFlag() cli.Flag {
	return &cli.BoolFlag{Name: "diff", EnvVars: []string{"PULUMI_OPERATOR_DIFF"}, Destination: &of.diff,
		Usage: "show a detailed diff of every change"}
}

// action runs op on the objects the flags name (runObjects).
func (of *objectFlags) action(cfg *config, op Operation) cli.ActionFunc {
	return func(c *cli.Context) error { return runObjects(c, cfg, of, op) }
}
