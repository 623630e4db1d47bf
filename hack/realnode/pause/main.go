// Command pause is the sandbox process of every pod on the real node (hack/realnode-up.sh): a
// static, stdlib-only stand-in for registry.k8s.io/pause, built into the image
// localhost/pulumi-operator/realnode/pause that containerd's sandbox_image names, because
// nothing may be pulled from a registry.
//
// As PID 1 of a pod it holds the pod's namespaces open, reaps the orphans that are re-parented
// to it (a zombie would otherwise stay in the pod's PID namespace), and exits 0 on SIGTERM or
// SIGINT, which is how the runtime stops a sandbox. `pause -v` prints its version and exits.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is printed by `pause -v`; bump it when the behaviour changes (the image is rebuilt
// whenever this file changes anyway).
const version = "1.0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Printf("pause (pulumi-operator realnode) %s\n", version)
		return
	}
	// Buffered: signals that arrive while children are being reaped are not lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every child that has exited, without blocking: one SIGCHLD may stand for
// several exits.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
