// Package initproc lets the operator be its container's PID 1. A container's first process is
// the init of its PID namespace: every process whose parent dies is handed to it, and only it can
// reap them. The operator's pulumi processes start provider plugins, which outlive a killed
// engine host or CLI; as PID 1 the operator, which waits only for the processes it started,
// would leave them as zombies for the life of the pod. So when the operator finds itself PID 1
// it runs itself again as its only child and does what an init does (tini's job): it forwards
// the signals that ask the program something to that child (forwarded), reaps every process
// that ends, and exits with the child's status.
//
// Written here because the images are distroless (no tini to put in front of it) and the reapers
// published as Go libraries reap from inside the process that also runs os/exec, which then
// loses the exit statuses of its own children; a separate parent has no such conflict.
package initproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
)

// ChildEnv marks the child Run starts, so that it does not become an init again.
const ChildEnv = "PULUMI_OPERATOR_INIT_CHILD"

// forwarded are the signals the init passes on to its child; it ignores every other one. They
// are the ones a container runtime or a person sends to ask the program something: SIGTERM and
// SIGINT (stop: the kubelet, `docker stop`, Ctrl-C), SIGQUIT (stop with a dump of every
// goroutine, Go's runtime), SIGUSR1 and SIGUSR2 (the program's own; the operator has no use for
// them, and a Go program without a handler ignores them), SIGWINCH (a terminal's new size).
// Not forwarded, unlike tini and dumb-init, which pass on nearly everything: SIGHUP (a
// terminal's hangup, and a container has no terminal to hang up: a Go program without a
// handler, as the operator is, dies of it) and the job-control signals SIGTSTP, SIGTTIN and
// SIGTTOU (the kernel stops a process without a handler, which would leave a leader holding its
// Lease without renewing it); nor anything else (SIGCONT, SIGPIPE, SIGALRM, real-time signals):
// none asks the operator anything. SIGCHLD is the init's own business.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH}

// Run returns at once unless this process is PID 1 and not Run's own child. Then it starts this
// executable again with the same arguments and environment (plus ChildEnv) as its child, acts as
// the init of the namespace until that child exits, and exits with the child's exit code (128
// plus the signal for a child killed by one); it never returns.
func Run() {
	if os.Getpid() != 1 || os.Getenv(ChildEnv) != "" {
		return
	}
	os.Exit(run(os.Args, os.Environ()))
}

// run is Run's init: it returns the exit code to exit with.
func run(args, env []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-operator: init: find this executable:", err)
		return 1
	}
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs)
	cmd := exec.Command(exe)
	cmd.Args = args
	cmd.Env = append(env, ChildEnv+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi-operator: init: start:", err)
		return 1
	}
	child := cmd.Process.Pid
	go func() {
		for s := range sigs {
			// Every signal is caught, so that none has its default action on the init itself
			// (one sent from outside the namespace would end or stop it); only some go on.
			if slices.Contains(forwarded, s) {
				_ = syscall.Kill(child, s.(syscall.Signal))
			}
		}
	}()
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			// No child left at all: the main child is gone without our seeing it.
			return 1
		}
		if pid != child {
			continue // an orphan reaped
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}
