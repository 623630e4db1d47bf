package commands

import "github.com/urfave/cli/v2"

// destroyCommand is `destroy`: delete one object's Kubernetes objects and remove its stack.
// It needs --yes (runObjects checks it before reading any input).
func destroyCommand(cfg *config, of *objectFlags) *cli.Command {
	return &cli.Command{
		Name: "destroy", Usage: "delete one KindCustomHttp's objects and remove its stack (the CR itself stays; delete it to stop the watcher re-creating them)",
		UsageText: "pulumi-operator destroy -f FILE | --from-cluster NAMESPACE/NAME --yes",
		Flags: append(of.sourceFlags(), &cli.BoolFlag{Name: "yes", Destination: &of.yes,
			Usage: "confirm: destroy deletes the Deployment, Service and ConfigMap"}),
		Action: of.action(cfg, Destroy),
	}
}
