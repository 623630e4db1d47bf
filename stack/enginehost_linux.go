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
// session (and so process group) keeps a terminal's Ctrl-C from stopping every run at once (the
// operator cancels each run itself, gracefully), and marks every process it starts, the
// provider plugins, for as long as they live (killSession).
func setEngineProcAttr(cmd *exec.Cmd) { setProcAttr(cmd) }

// setProcAttr gives a pulumi process (an engine host, a CLI run) the engine host's treatment
// (see setEngineProcAttr): killed with the operator, in a session of its own. The session has
// no controlling terminal (no Setctty), and the CLI opens none: it runs --non-interactive with
// pipes for its standard streams.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
}

// killGroup sends SIGKILL to p, every process below it (the provider plugins it started, which
// pulumi puts in process groups of their own), p's process group and p's session. The
// processes below are found first (/proc's parent links), while p still holds them; the
// session also holds those whose parent has died already.
func killGroup(p *os.Process) {
	below := descendants(p.Pid)
	_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
	_ = p.Kill()
	for _, pid := range below {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	killSession(p.Pid)
}

// setNice sets the nice value of process pid to n (setpriority(2), PRIO_PROCESS): the processes
// it starts from then on inherit it.
func setNice(pid, n int) error {
	return syscall.Setpriority(syscall.PRIO_PROCESS, pid, n)
}
