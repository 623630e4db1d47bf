// Command pulumi-operator reconciles KindCustomHttp custom resources
// (groupsp.measutosh.dev/v1) by running Pulumi: one stack per object, holding its
// Deployment, Service and ConfigMap. `watch` runs the reconciler; up, preview, refresh,
// destroy and stacks run against the same stacks from the command line. The commands are
// package commands; see README.md.
package main

import (
	"fmt"
	"os"

	"github.com/pulumi-operator/pulumi-operator/commands"
)

// main runs the command line and exits with its exit code (commands.ExitCode), printing any
// error first.
func main() {
	err := commands.App().Run(os.Args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-operator:", err)
	}
	os.Exit(commands.ExitCode(err))
}
