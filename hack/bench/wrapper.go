package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// wrapperEnv names the environment of wrapper mode: when this program is run as `pulumi`
// (through a symlink) with wrapperReal set, it runs the real CLI and appends one JSON line
// per run (arguments, wall time, CPU of the CLI and of the plugins it waited for) to
// wrapperLog.
const (
	wrapperReal = "PULUMI_BENCH_REAL_CLI"
	wrapperLog  = "PULUMI_BENCH_CLI_LOG"
)

// cliRun is one line of the wrapper's log.
type cliRun struct {
	Args  []string  `json:"args"`
	Start time.Time `json:"start"`
	Wall  float64   `json:"wall"`
	CPU   float64   `json:"cpu"`
	Exit  int       `json:"exit"`
}

// runWrapper is main in wrapper mode, running real; it returns the exit code.
func runWrapper(real string) int {
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "pulumi bench wrapper:", err)
		return 127
	}
	sig := make(chan os.Signal, 4)
	notifySignals(sig)
	go func() {
		for s := range sig {
			_ = cmd.Process.Signal(s)
		}
	}()
	err := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if log := os.Getenv(wrapperLog); log != "" && cmd.ProcessState != nil {
		ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := 0.0
		if ru != nil {
			cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		line, _ := jsonMarshal(cliRun{Args: os.Args[1:], Start: start, Wall: time.Since(start).Seconds(), CPU: cpu, Exit: code})
		if f, err := os.OpenFile(log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, _ = f.Write(append(line, '\n'))
			f.Close()
		}
	}
	return code
}

// readCLIRuns reads a wrapper log.
func readCLIRuns(path string) ([]cliRun, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []cliRun
	dec := jsonDecoder(f)
	for {
		var r cliRun
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, err
		}
		out = append(out, r)
	}
}
