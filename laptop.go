package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/envsource"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// Exit codes of the laptop and CI commands, distinct so scripts can branch on them.
const (
	// ExitFailed: a Pulumi operation failed (or any other error).
	ExitFailed = 1
	// ExitInvalidInput: a file, document or flag is wrong; nothing was run or written.
	ExitInvalidInput = 2
	// ExitLocked: another update (the in-cluster watcher, a colleague) holds a stack's lock.
	ExitLocked = 3
	// ExitChanges: `preview --expect-no-changes` found changes.
	ExitChanges = 4
)

// laptopFlags are the flags of up, preview, refresh and destroy.
type laptopFlags struct {
	files            cli.StringSlice
	fromCluster      string
	namespace        string
	ignoreOtherKinds bool
	jsonOut          bool
	diff             bool
	waitForLock      time.Duration
	expectNoChanges  bool
	summaryMarkdown  string
	yes              bool
}

func laptopCommands(cfg *config) []*cli.Command {
	lf := &laptopFlags{}
	source := []cli.Flag{
		&cli.StringSliceFlag{Name: "filename", Aliases: []string{"f"}, EnvVars: []string{"PULUMI_OPERATOR_FILES"}, Destination: &lf.files,
			Usage: "KindCustomHttp `FILE` or directory of them (multi-document YAML); repeatable"},
		&cli.StringFlag{Name: "from-cluster", EnvVars: []string{"PULUMI_OPERATOR_FROM_CLUSTER"}, Destination: &lf.fromCluster,
			Usage: "read the live object `NAMESPACE/NAME` from the cluster instead of a file"},
		&cli.StringFlag{Name: "namespace", Aliases: []string{"n"}, EnvVars: []string{"PULUMI_OPERATOR_NAMESPACE"}, Value: "default", Destination: &lf.namespace,
			Usage: "`NAMESPACE` of documents that name none"},
		&cli.BoolFlag{Name: "ignore-other-kinds", EnvVars: []string{"PULUMI_OPERATOR_IGNORE_OTHER_KINDS"}, Destination: &lf.ignoreOtherKinds,
			Usage: "skip documents that are not KindCustomHttp (default: they are errors)"},
		&cli.BoolFlag{Name: "json", EnvVars: []string{"PULUMI_OPERATOR_JSON"}, Destination: &lf.jsonOut,
			Usage: "print results as JSON on stdout (progress goes to stderr)"},
		&cli.DurationFlag{Name: "wait-for-lock", EnvVars: []string{"PULUMI_OPERATOR_WAIT_FOR_LOCK"}, Destination: &lf.waitForLock,
			Usage: "when another update holds a stack's lock, wait up to `DURATION` (default: exit " + fmt.Sprint(ExitLocked) + " at once)"},
	}
	withDiff := append(source[:len(source):len(source)], &cli.BoolFlag{Name: "diff", EnvVars: []string{"PULUMI_OPERATOR_DIFF"}, Destination: &lf.diff,
		Usage: "show a detailed diff of every change"})
	run := func(op string) cli.ActionFunc {
		return func(c *cli.Context) error { return runLaptop(c, cfg, lf, op) }
	}
	return []*cli.Command{
		{
			Name: "up", Usage: "create or update the stacks of KindCustomHttp files, as the in-cluster watcher would",
			UsageText: "pulumi-operator [global options] up -f FILE|DIR [-f ...] [--diff] [--json] [--wait-for-lock 5m]\n" +
				"pulumi-operator up --from-cluster NAMESPACE/NAME",
			Description: "Examples:\n   pulumi-operator --kubeconfig ~/.kube/config up -f config/samples/ --ignore-other-kinds\n" +
				"   PULUMI_BACKEND_URL=s3://state pulumi-operator up --from-cluster peerns/kindcustomhttp-sample --wait-for-lock 5m",
			Flags: withDiff, Action: run("up"),
		},
		{
			Name: "preview", Usage: "show what up would change, changing nothing (for CI)",
			UsageText: "pulumi-operator preview -f FILE|DIR [-f ...] [--diff] [--expect-no-changes] [--summary-markdown FILE] [--json]",
			Description: "Exit " + fmt.Sprint(ExitChanges) + " with --expect-no-changes when anything would change.\nExamples:\n" +
				"   pulumi-operator preview -f deploy/ --summary-markdown \"$GITHUB_STEP_SUMMARY\"\n" +
				"   pulumi-operator preview -f deploy/ --expect-no-changes --diff",
			Flags: append(withDiff[:len(withDiff):len(withDiff)],
				&cli.BoolFlag{Name: "expect-no-changes", EnvVars: []string{"PULUMI_OPERATOR_EXPECT_NO_CHANGES"}, Destination: &lf.expectNoChanges,
					Usage: fmt.Sprintf("exit %d, printing the diff, when any stack would change", ExitChanges)},
				&cli.StringFlag{Name: "summary-markdown", EnvVars: []string{"PULUMI_OPERATOR_SUMMARY_MARKDOWN"}, Destination: &lf.summaryMarkdown,
					Usage: "append a Markdown summary (for a pull-request comment or CI job summary) to `FILE`"}),
			Action: run("preview"),
		},
		{
			Name: "refresh", Usage: "read the live objects of one KindCustomHttp's stack into its state",
			UsageText: "pulumi-operator refresh -f FILE | --from-cluster NAMESPACE/NAME",
			Flags:     source, Action: run("refresh"),
		},
		{
			Name: "destroy", Usage: "delete one KindCustomHttp's objects and remove its stack (the CR itself stays; delete it to stop the watcher re-creating them)",
			UsageText: "pulumi-operator destroy -f FILE | --from-cluster NAMESPACE/NAME --yes",
			Flags: append(source[:len(source):len(source)], &cli.BoolFlag{Name: "yes", Destination: &lf.yes,
				Usage: "confirm: destroy deletes the Deployment, Service and ConfigMap"}),
			Action: run("destroy"),
		},
		{
			Name: "stacks", Usage: "list the stacks in the backend with the KindCustomHttp each belongs to",
			Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Destination: &lf.jsonOut, Usage: "print JSON"}},
			Action: func(c *cli.Context) error { return runStacks(c, cfg, lf) },
		},
		{
			Name: "completion", Usage: "print a shell completion script: source <(pulumi-operator completion bash)",
			ArgsUsage: "bash|zsh",
			Action:    printCompletion,
		},
	}
}

// result is one stack's outcome, as --json prints it.
type result struct {
	Object    string            `json:"object"`
	Stack     string            `json:"stack"`
	Operation string            `json:"operation"`
	Changes   map[string]int    `json:"changes,omitempty"`
	Outputs   map[string]string `json:"outputs,omitempty"`
	Error     string            `json:"error,omitempty"`
	diff      string
}

func (r result) changed() bool {
	return stack.Result{Changes: r.Changes}.Changed()
}

// runLaptop loads the objects (all of them, before any Pulumi run, so bad input writes
// nothing), then runs op on each object's stack in turn.
func runLaptop(c *cli.Context, cfg *config, lf *laptopFlags, op string) error {
	ctx := c.Context
	if c.NArg() > 0 {
		return cli.Exit(fmt.Sprintf("unexpected argument %q: name files with -f", c.Args().First()), ExitInvalidInput)
	}
	if op == "destroy" && !lf.yes {
		return cli.Exit("destroy deletes the objects of the stack: pass --yes to confirm", ExitInvalidInput)
	}
	var client dynamic.Interface
	needCluster := lf.fromCluster != "" || cfg.clusterName == ""
	if needCluster {
		rc, err := restConfig(cfg.kubeconfig)
		if err != nil {
			return cli.Exit(err.Error(), ExitInvalidInput)
		}
		if client, err = dynamic.NewForConfig(rc); err != nil {
			return err
		}
	}
	docs, err := loadObjects(ctx, lf, client)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	if err := envDigests(ctx, cfg, docs); err != nil {
		return cli.Exit(err.Error(), ExitFailed)
	}
	if op != "up" && op != "preview" && len(docs) != 1 {
		return cli.Exit(fmt.Sprintf("%s works on one KindCustomHttp at a time; the input has %d", op, len(docs)), ExitInvalidInput)
	}
	mgr, _, err := newStackManager(ctx, cfg, client)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	out, progress := c.App.Writer, c.App.Writer
	if lf.jsonOut {
		progress = c.App.ErrWriter
	}
	color := "never"
	if f, ok := progress.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		color = "auto" // Pulumi's own interactive display
	}
	var results []result
	locked := false
	for _, d := range docs {
		r := runOne(ctx, mgr, d, op, lf, progress, color)
		if errors.Is(r.err, stack.ErrLocked) {
			locked = true
		}
		results = append(results, r.result)
	}
	return report(out, lf, op, results, locked)
}

type outcome struct {
	result
	err error
}

// runOne runs op on d's stack, waiting for a lock up to --wait-for-lock.
func runOne(ctx context.Context, mgr *stack.Manager, d api.Document, op string, lf *laptopFlags, progress io.Writer, color string) outcome {
	name, _ := mgr.StackName(d.Desired.Namespace, d.Desired.Name)
	r := result{Object: d.Desired.Namespace + "/" + d.Desired.Name, Stack: mgr.QualifiedName(name), Operation: op}
	opts := stack.RunOptions{Diff: lf.diff, Color: color, Progress: progress}
	var diff bytes.Buffer
	if op == "preview" {
		// The preview's own output is kept and shown only where it helps: with --diff, or
		// when --expect-no-changes fails.
		opts.Progress, opts.Diff, opts.Color = &diff, true, "never"
	}
	deadline := time.Now().Add(lf.waitForLock)
	for {
		var res stack.Result
		var err error
		switch op {
		case "up":
			res, err = mgr.Up(ctx, name, infra.Program(d.Desired), opts)
		case "preview":
			diff.Reset()
			res, err = mgr.Preview(ctx, name, infra.Program(d.Desired), opts)
		case "refresh":
			res, err = mgr.Refresh(ctx, name, opts)
		case "destroy":
			res, err = mgr.Destroy(ctx, name, opts)
		}
		if errors.Is(err, stack.ErrLocked) && time.Now().Before(deadline) {
			fmt.Fprintf(progress, "stack %s is locked by another update; waiting (until %s)\n", name, deadline.Format(time.TimeOnly))
			select {
			case <-time.After(2 * time.Second):
				continue
			case <-ctx.Done():
			}
		}
		for _, line := range res.Recovered {
			fmt.Fprintf(progress, "warning: stack %s: an interrupted update had left a pending operation: %s\n", name, line)
		}
		r.Changes, r.Outputs, r.diff = res.Changes, res.Outputs, diff.String()
		if err != nil {
			r.Error = err.Error()
			if errors.Is(err, stack.ErrLocked) {
				r.Error = lockMessage(name, err, lf.waitForLock)
			}
		}
		return outcome{r, err}
	}
}

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

// envDigests fills in Desired.EnvDigest from the cluster for objects with envFrom, exactly as
// the watcher does, so that a laptop up applies the same pod template.
func envDigests(ctx context.Context, cfg *config, docs []api.Document) error {
	var kube kubernetes.Interface
	for i := range docs {
		if len(docs[i].Desired.EnvFrom) == 0 {
			continue
		}
		if kube == nil {
			rc, err := restConfig(cfg.kubeconfig)
			if err != nil {
				return fmt.Errorf("%s: spec.envFrom needs the cluster: %w", docs[i].Where(), err)
			}
			if kube, err = kubernetes.NewForConfig(rc); err != nil {
				return err
			}
		}
		digest, err := envsource.Digest(ctx, kube, docs[i].Desired)
		if err != nil {
			return fmt.Errorf("%s: %w", docs[i].Where(), err)
		}
		docs[i].Desired.EnvDigest = digest
	}
	return nil
}

// loadObjects reads -f files or the --from-cluster object.
func loadObjects(ctx context.Context, lf *laptopFlags, client dynamic.Interface) ([]api.Document, error) {
	files := lf.files.Value()
	switch {
	case lf.fromCluster != "" && len(files) > 0:
		return nil, errors.New("give -f or --from-cluster, not both")
	case lf.fromCluster == "":
		return api.LoadDocuments(files, api.LoadOptions{Namespace: lf.namespace, IgnoreOtherKinds: lf.ignoreOtherKinds})
	}
	ns, name, ok := strings.Cut(lf.fromCluster, "/")
	if !ok || ns == "" || name == "" {
		return nil, fmt.Errorf("--from-cluster %q: want NAMESPACE/NAME", lf.fromCluster)
	}
	u, err := client.Resource(api.GroupVersionResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("read KindCustomHttp %s from the cluster: %w", lf.fromCluster, err)
	}
	obj, err := api.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	d, err := api.Resolve(obj)
	if err != nil {
		return nil, err
	}
	return []api.Document{{File: "cluster", Index: 1, Line: 1, Object: obj, Desired: d}}, nil
}

// report prints the results (table or JSON), writes the Markdown summary, and picks the exit
// code: locked, failed, changes (with --expect-no-changes), or success.
func report(out io.Writer, lf *laptopFlags, op string, results []result, locked bool) error {
	failed, changed := 0, 0
	for _, r := range results {
		if r.Error != "" {
			failed++
		} else if r.changed() {
			changed++
		}
	}
	if lf.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []result `json:"results"`
		}{results}); err != nil {
			return err
		}
	} else {
		printTable(out, results)
		if op == "preview" {
			for _, r := range results {
				if r.diff != "" && (lf.diff || (lf.expectNoChanges && r.changed())) {
					fmt.Fprintf(out, "\n--- %s (%s)\n%s", r.Object, r.Stack, r.diff)
				}
			}
		}
	}
	if lf.summaryMarkdown != "" {
		if err := appendMarkdown(lf.summaryMarkdown, op, results, lf.diff); err != nil {
			return cli.Exit(fmt.Sprintf("write --summary-markdown: %v", err), ExitFailed)
		}
	}
	switch {
	case locked:
		var msgs []string
		for _, r := range results {
			if strings.Contains(r.Error, "locked by") {
				msgs = append(msgs, r.Error)
			}
		}
		return cli.Exit(op+": "+strings.Join(msgs, "; "), ExitLocked)
	case failed > 0:
		return cli.Exit(fmt.Sprintf("%s failed for %d of %d objects", op, failed, len(results)), ExitFailed)
	case op == "preview" && lf.expectNoChanges && changed > 0:
		return cli.Exit(fmt.Sprintf("preview: %d of %d objects would change (--expect-no-changes)", changed, len(results)), ExitChanges)
	}
	return nil
}

var changeColumns = []string{"create", "update", "replace", "delete", "same"}

func printTable(out io.Writer, results []result) {
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "OBJECT\tSTACK\tCREATE\tUPDATE\tREPLACE\tDELETE\tSAME\tRESULT")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s", r.Object, r.Stack)
		for _, k := range changeColumns {
			fmt.Fprintf(tw, "\t%d", r.Changes[k])
		}
		fmt.Fprintf(tw, "\t%s\n", resultWord(r))
	}
	_ = tw.Flush()
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(out, "%s: %s\n", r.Object, r.Error)
		}
	}
}

func resultWord(r result) string {
	switch {
	case r.Error != "":
		return "failed"
	case r.changed():
		return "changes"
	}
	return "no changes"
}

// appendMarkdown appends a summary table (and, with diffs, a collapsed block per changed
// object) to path, as GitHub's $GITHUB_STEP_SUMMARY expects.
func appendMarkdown(path, op string, results []result, withDiff bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### pulumi-operator %s\n\n| Object | Stack | Create | Update | Replace | Delete | Same | Result |\n|---|---|--:|--:|--:|--:|--:|---|\n", op)
	changed := 0
	for _, r := range results {
		fmt.Fprintf(&b, "| `%s` | `%s` |", r.Object, r.Stack)
		for _, k := range changeColumns {
			fmt.Fprintf(&b, " %d |", r.Changes[k])
		}
		fmt.Fprintf(&b, " %s |\n", resultWord(r))
		if r.changed() {
			changed++
		}
	}
	fmt.Fprintf(&b, "\n%d objects, %d with changes.\n", len(results), changed)
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(&b, "\n**%s failed:** %s\n", r.Object, r.Error)
		}
		if withDiff && r.changed() && r.diff != "" {
			fmt.Fprintf(&b, "\n<details><summary>%s</summary>\n\n```diff\n%s```\n</details>\n", r.Object, r.diff)
		}
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runStacks lists the project's stacks in the backend.
func runStacks(c *cli.Context, cfg *config, lf *laptopFlags) error {
	// Listing needs no cluster: any cluster name does, it only shapes stack names.
	if cfg.clusterName == "" {
		cfg.clusterName = "list"
	}
	mgr, _, err := newStackManager(c.Context, cfg, nil)
	if err != nil {
		return cli.Exit(err.Error(), ExitInvalidInput)
	}
	list, err := mgr.ListStacks(c.Context)
	if err != nil {
		return err
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	if lf.jsonOut {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "STACK\tCLUSTER\tOBJECT\tRESOURCES\tLAST UPDATE\tLOCKED")
	for _, s := range list {
		obj := "-"
		if s.CRName != "" {
			obj = s.Namespace + "/" + s.CRName
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%v\n", s.Name, s.Cluster, obj, s.Resources, s.LastUpdate, s.UpdateInProgress)
	}
	return tw.Flush()
}

// bashCompletion drives urfave/cli's --generate-bash-completion. urfave/cli v2 ships this
// script only as a file in its repository, not in the module's API, hence a copy here.
const bashCompletion = `_pulumi_operator_complete() {
  local cur opts
  COMPREPLY=()
  cur="${COMP_WORDS[COMP_CWORD]}"
  opts=$("${COMP_WORDS[0]}" "${COMP_WORDS[@]:1:$COMP_CWORD-1}" --generate-bash-completion 2>/dev/null)
  COMPREPLY=($(compgen -W "${opts}" -- "${cur}"))
  return 0
}
complete -o bashdefault -o default -F _pulumi_operator_complete pulumi-operator
`

func printCompletion(c *cli.Context) error {
	switch c.Args().First() {
	case "bash":
		_, err := io.WriteString(c.App.Writer, bashCompletion)
		return err
	case "zsh":
		_, err := io.WriteString(c.App.Writer, "autoload -U +X bashcompinit && bashcompinit\n"+bashCompletion)
		return err
	}
	return cli.Exit("completion: name a shell: bash or zsh", ExitInvalidInput)
}
