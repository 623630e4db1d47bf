package commands

import "github.com/urfave/cli/v2"

// refreshCommand is `refresh`: read one object's live Kubernetes objects into its stack's
// state.
func refreshCommand(cfg *config, of *objectFlags) *cli.Command {
	return &cli.Command{
		Name: "refresh", Usage: "read the live objects of one KindCustomHttp's stack into its state",
		UsageText: "pulumi-operator refresh -f FILE | --from-cluster NAMESPACE/NAME",
		Flags:     of.sourceFlags(),
		Action:    of.action(cfg, Refresh),
	}
}
