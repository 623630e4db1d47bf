// Package commands is the pulumi-operator command line: the global flags and the commands
// watch (the reconciler, run in the cluster) and up, preview, refresh, destroy and stacks (run
// by a person or a CI job against the same stacks), plus completion. App builds the
// urfave/cli application; ExitCode turns its error into the process's exit status.
//
// Boundary: this package and watcher are the only packages that read KindCustomHttp objects
// from the Kubernetes API (the dynamic client): watch hands the cluster to watcher.Watcher,
// and the object commands read one object with --from-cluster. Everything Pulumi does goes
// through stack.Manager, every Kubernetes resource a stack holds is declared by
// infra.Program, and envFrom digests come from internal/desired, as in the watcher, so that both
// plan the same changes. Only package main exits the process.
//
// One file per command (up.go, preview.go, refresh.go, destroy.go, stacks.go, watch.go,
// completion.go); objects.go runs an Operation on each object's stack, report.go prints the
// results, exitcode.go defines the exit codes.
package commands
