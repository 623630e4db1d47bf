package stack

import (
	"os"
	"os/exec"
	"syscall"
)

// setEngineProcAttr makes the kernel kill the engine host when the operator dies (SIGKILL, a
// crashed pod), as a container's processes die together: an engine host left behind would keep
// the locks of its runs alive, and the next operator could not tell them stale
// (Lock.OwnerGone). (The signal is tied to the thread that started it, which Go's runtime does
// not end while the process runs; its input closing is the second way it learns.) Its own
// process group keeps a terminal's Ctrl-C from stopping every run at once: the operator
// cancels each run itself, gracefully.
func setEngineProcAttr(cmd *exec.Cmd) { setProcAttr(cmd) }

// setProcAttr gives a pulumi process (an engine host, a CLI run) the engine host's treatment
// (see setEngineProcAttr): killed with the operator, in a process group of its own.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// killGroup sends SIGKILL to p, every process below it (the provider plugins it started, which
// pulumi puts in process groups of their own) and p's process group. The processes below are
// found first (/proc's parent links), while p still holds them.
func killGroup(p *os.Process) {
	below := descendants(p.Pid)
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
	for _, pid := range below {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}
