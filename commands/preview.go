package commands

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// previewCommand is `preview`: what up would change, changing nothing; with
// --expect-no-changes a CI check that exits ExitChanges.
func previewCommand(cfg *config, of *objectFlags) *cli.Command {
	return &cli.Command{
		Name: "preview", Usage: "show what up would change, changing nothing (for CI)",
		UsageText: "pulumi-operator preview -f FILE|DIR [-f ...] | --all [-n NAMESPACE] [--diff] [--expect-no-changes] [--summary-markdown FILE] [--json]",
		Description: "Exit " + fmt.Sprint(ExitChanges) + " with --expect-no-changes when anything would change.\nExamples:\n" +
			"   pulumi-operator preview -f deploy/ --summary-markdown \"$GITHUB_STEP_SUMMARY\"\n" +
			"   pulumi-operator preview -f deploy/ --expect-no-changes --diff\n" +
			"   pulumi-operator preview --all --summary-markdown summary.md   # what this build would change on every stack of the cluster",
		Flags: append(of.sourceFlags(), of.diffFlag(), of.parallelFlag(),
			&cli.BoolFlag{Name: "all", EnvVars: []string{"PULUMI_OPERATOR_ALL"}, Destination: &of.all,
				Usage: "preview every KindCustomHttp the cluster holds (of --namespace when given), as they are there: what this build of the operator would change on each stack (objects being deleted are left out)"},
			&cli.BoolFlag{Name: "expect-no-changes", EnvVars: []string{"PULUMI_OPERATOR_EXPECT_NO_CHANGES"}, Destination: &of.expectNoChanges,
				Usage: fmt.Sprintf("exit %d, printing the diff, when any stack would change", ExitChanges)},
			&cli.StringFlag{Name: "summary-markdown", EnvVars: []string{"PULUMI_OPERATOR_SUMMARY_MARKDOWN"}, Destination: &of.summaryMarkdown,
				Usage: "append a Markdown summary (for a pull-request comment or CI job summary) to `FILE`"}),
		Action: of.action(cfg, Preview),
	}
}
