//go:build !linux

package stack

import "os/exec"

// setEngineProcAttr does nothing off Linux, which has no parent-death signal: the engine host
// exits when its input closes, which the operator's death does too, once its runs have ended.
func setEngineProcAttr(*exec.Cmd) {}
