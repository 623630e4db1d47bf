// Command pulumi is the pinned pulumi CLI and, started as pulumi-operator-engine, the operator's
// engine host (package enginehost): one binary, two names, chosen by the base name of os.Args[0]
// the way busybox or k3s choose (bin/ and the image hold pulumi-operator-engine as a symbolic
// link to pulumi). As the CLI it has one command of the operator's besides the CLI's own, `pulumi
// operator-request` (protocol.RequestCommand, enginehost.RequestMain): the requests of the engine
// host's service that one process is given, for an operator that runs without an engine host.
//
// Why one binary: the engine host is pkg/v3's engine and DIY backend, most of what the CLI
// links, and must be the very pkg/v3 the CLI runs; in one binary the image carries pkg/v3 once.
// The operator itself stays a binary of its own: linking pkg/v3 would add the CLI's package
// initialisation, and the heap it keeps, to the operator's idle memory. docs/design/engine-host.md
// ("The image") has the sizes and the memory behind both choices.
//
// This directory holds only the dispatch. The CLI's own main package (pkg/v3/cmd/pulumi, at the
// version in agent/go.mod) is compiled into this package without being copied: hack/cli-overlay.sh
// writes a `go build -overlay` file that adds that package's files here from the module cache,
// and the Makefile and the Dockerfile build with it. Without the overlay this package has no
// main function and does not link; `go vet` and `go test` still check this file.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi-operator/pulumi-operator/agent/enginehost"
	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// EngineHostName is the name under which this binary is the engine host. It must equal the
// operator's stack.EngineHost (stack/enginehost.go), which starts it by that name.
const EngineHostName = "pulumi-operator-engine"

// init runs before the CLI's main (it is the only init of this package). It keeps the holder
// record the operator gave it from the plugins it will start (protocol.KeepHolderRecord), takes on
// the lease a leader-elected operator hands down (protocol.WatchLease: this process and what it
// started end at the lease's deadline, whether or not the operator can still act), then turns the
// process into the engine host when it was started by that name, or runs the request command
// when the arguments name it; anything else is the CLI. A
// lease that cannot be read ends the process at once, exit code 255: the operator meant it to
// write only under one.
func init() {
	protocol.KeepHolderRecord(os.Getenv)
	if _, err := protocol.WatchLease(os.Getenv, endLease); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(255)
	}
	if isEngineHost(os.Args) {
		enginehost.Main() // exits the process
	}
	if args, ok := commandArgs(os.Args, protocol.RequestCommand); ok {
		enginehost.RequestMain(args) // exits the process
	}
}

// commandArgs returns the arguments of the operator's command name (protocol.RequestCommand) when
// args (os.Args) run it: the first argument after the program's name and any --non-interactive
// (which the operator puts before every command, as the Automation API does) is the command's
// name.
func commandArgs(args []string, name string) ([]string, bool) {
	if len(args) == 0 {
		return nil, false
	}
	rest := args[1:]
	for len(rest) > 0 && rest[0] == "--non-interactive" {
		rest = rest[1:]
	}
	if len(rest) == 0 || rest[0] != name {
		return nil, false
	}
	return rest[1:], true
}

// isEngineHost reports whether args (os.Args) name the engine host: the base name of args[0],
// with a ".exe" suffix removed, is EngineHostName.
func isEngineHost(args []string) bool {
	if len(args) == 0 {
		return false
	}
	return strings.TrimSuffix(filepath.Base(args[0]), ".exe") == EngineHostName
}
