// Command pulumi-operator reconciles KindCustomHttp custom resources
// (groupsp.measutosh.dev/v1) by running Pulumi: one stack per object, holding its
// Deployment, Service and ConfigMap. `watch` runs the reconciler; up, preview, refresh,
// destroy and stacks run against the same stacks from the command line. The commands are
// package commands; see README.md. Started by the Pulumi engine (the plain `pulumi` CLI, with
// Pulumi.yaml naming this binary), it is instead the project's Pulumi program: package program.
package main

import (
	"os"

	"github.com/pulumi-operator/pulumi-operator/commands"
	"github.com/pulumi-operator/pulumi-operator/commands/program"
	"github.com/pulumi-operator/pulumi-operator/internal/initproc"
)

// main runs the Pulumi program when the engine started the process (program.Started), else
// the command line (commands.Main, which writes any error in the log format), exiting with its
// exit code. As a container's PID 1 it first becomes that container's init (initproc.Run), which
// runs the rest in a child.
func main() {
	initproc.Run()
	if program.Started(os.Args, os.Getenv) {
		program.Main()
		return
	}
	os.Exit(commands.Main(os.Args, os.Stderr))
}
