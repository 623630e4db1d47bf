package commands

import (
	"encoding/json"
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/urfave/cli/v2"
)

// stacksCommand is `stacks`: list the project's stacks in the backend.
func stacksCommand(cfg *config, of *objectFlags) *cli.Command {
	return &cli.Command{
		Name: "stacks", Usage: "list the stacks in the backend with the KindCustomHttp each belongs to",
		Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Destination: &of.jsonOut, Usage: "print JSON"}},
		Action: func(c *cli.Context) error { return runStacks(c, cfg, of) },
	}
}

// runStacks lists the project's stacks in the backend, sorted by name, as a table or JSON.
// A backend or project that cannot be set up exits ExitInvalidInput; a failed listing
// ExitFailed.
func runStacks(c *cli.Context, cfg *config, of *objectFlags) error {
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
	if of.jsonOut {
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
