//go:build !linux

package stack

import (
	"os"
	"os/exec"
)

// setEngineProcAttr does nothing off Linux, which has no parent-death signal: the engine host
// exits when its input closes, which the operator's death does too, once its runs have ended.
func setEngineProcAttr(*exec.Cmd) {}

// setProcAttr does nothing off Linux (see setEngineProcAttr).
func setProcAttr(*exec.Cmd) {}

// killGroup kills p alone off Linux.
func killGroup(p *os.Process) { _ = p.Kill() }

// setNice does nothing off Linux: background runs keep the operator's priority.
func setNice(int, int) error { return nil }
