package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

// result is one stack's outcome, as --json prints it.
type result struct {
	Object    string            `json:"object"`
	Stack     string            `json:"stack"`
	Operation Operation         `json:"operation"`
	Changes   map[string]int    `json:"changes,omitempty"`
	Outputs   map[string]string `json:"outputs,omitempty"`
	Error     string            `json:"error,omitempty"`
	// Adopts lists, for a preview, the objects of the original operator (http-go-operator)
	// that the operator in the cluster takes over for this object (ownership.FindOriginal):
	// the preview counts them as creates.
	Adopts   []string `json:"adopts,omitempty"`
	diff     string   // the preview's output (preview only)
	streamed bool     // diff was shown as the preview ran
	err      error    // the operation's error, for errors.Is; Error is its message
}

func (r result) changed() bool {
	return stack.Result{Changes: r.Changes}.Changed()
}

// report prints the results (table or JSON), writes the Markdown summary, and picks the exit
// code: ExitTimeout when any stack was locked (stack.ErrLocked), else ExitFailed when any
// operation failed, else ExitChanges for `preview --expect-no-changes` with changes, else nil.
func report(out io.Writer, of *objectFlags, op Operation, results []result) error {
	failed, changed := 0, 0
	var locked []string
	for _, r := range results {
		switch {
		case errors.Is(r.err, stack.ErrLocked):
			locked = append(locked, r.Error)
			failed++
		case r.Error != "":
			failed++
		case r.changed():
			changed++
		}
	}
	if of.jsonOut {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Results []result `json:"results"`
		}{results}); err != nil {
			return err
		}
	} else {
		printTable(out, results)
		if op == Preview {
			for _, r := range results {
				if r.diff != "" && !r.streamed && (of.diff || (of.expectNoChanges && r.changed())) {
					fmt.Fprintf(out, "\n--- %s (%s)\n%s", r.Object, r.Stack, r.diff)
				}
			}
		}
	}
	if of.summaryMarkdown != "" {
		if err := appendMarkdown(of.summaryMarkdown, op, results, of.diff); err != nil {
			return cli.Exit(fmt.Sprintf("write --summary-markdown: %v", err), ExitFailed)
		}
	}
	switch {
	case len(locked) > 0:
		return cli.Exit(op.String()+": "+strings.Join(locked, "; "), ExitTimeout)
	case failed > 0:
		return cli.Exit(fmt.Sprintf("%s failed for %d of %d objects", op, failed, len(results)), ExitFailed)
	case op == Preview && of.expectNoChanges && changed > 0:
		return cli.Exit(fmt.Sprintf("preview: %d of %d objects would change (--expect-no-changes)", changed, len(results)), ExitChanges)
	}
	return nil
}

// changeColumns are the keys of result.Changes shown as columns, in order.
var changeColumns = []string{"create", "update", "replace", "delete", "same"}

// printTable prints one row per result, then each failed object's error.
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
		if len(r.Adopts) > 0 {
			fmt.Fprintf(out, "%s: takes over %s from the original operator once allowed (annotation %s=true, or watch --adopt-original); counted as creates\n",
				r.Object, strings.Join(r.Adopts, ", "), api.AdoptOriginalAnnotation)
		}
	}
}

// resultWord is the RESULT column: failed, changes or no changes.
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
// object) to path, as GitHub's $GITHUB_STEP_SUMMARY expects. The file is created (0644) if
// missing; its errors are the file system's.
func appendMarkdown(path string, op Operation, results []result, withDiff bool) error {
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
		if len(r.Adopts) > 0 {
			fmt.Fprintf(&b, "\n**%s takes over from the original operator:** %s, once allowed (annotation `%s=true`, or `watch --adopt-original`). Counted as creates above: the Service and ConfigMap are kept, the Deployment is replaced by one whose pods serve before the original pods go (README \"Switching from http-go-operator\").\n",
				r.Object, strings.Join(r.Adopts, ", "), api.AdoptOriginalAnnotation)
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
