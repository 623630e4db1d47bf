package commands

import "github.com/urfave/cli/v2"

// upCommand is `up`: create or update each object's stack, as the watcher would.
func upCommand(cfg *config, of *objectFlags) *cli.Command {
	return &cli.Command{
		Name: "up", Usage: "create or update the stacks of KindCustomHttp files, as the in-cluster watcher would",
		UsageText: "pulumi-operator [global options] up -f FILE|DIR [-f ...] [--diff] [--json] [--wait-for-lock 5m]\n" +
			"pulumi-operator up --from-cluster NAMESPACE/NAME",
		Description: "Examples:\n   pulumi-operator --kubeconfig ~/.kube/config up -f config/samples/ --ignore-other-kinds\n" +
			"   PULUMI_BACKEND_URL=s3://state pulumi-operator up --from-cluster peerns/kindcustomhttp-sample --wait-for-lock 5m",
		Flags:  append(of.sourceFlags(), of.diffFlag(), of.parallelFlag(), of.rolloutFlag()),
		Action: of.action(cfg, Up),
	}
}
