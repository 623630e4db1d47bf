package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// logLine is one record of the operator's log, written by log/slog's JSONHandler
// (`--log-format json`, which startOperator passes): the fields the bench reads. The watcher
// logs "running up" and "stack up to date" with the object ("namespace/name") and its
// generation.
type logLine struct {
	At         time.Time `json:"time"` // RFC 3339 with nanoseconds (the text handler wrote milliseconds)
	Msg        string    `json:"msg"`
	Object     string    `json:"object"`
	Generation int64     `json:"generation"`
	// Why is a "running up"'s cause: the Event reason (Created, Updated, ProgramUpgraded, ...).
	Why string `json:"why"`
}

// parseLog decodes the operator's log, one JSON object a line. A line that is not a record
// is skipped: the operator's stdout and stderr share the file (a panic's trace, a child's
// output), and a line still being written does not parse until it is whole. So is a record
// without a time or whose fields have other types. Errors: only reading r failed.
func parseLog(r io.Reader) ([]logLine, error) {
	br := bufio.NewReader(r)
	var out []logLine
	for {
		// ReadBytes, not a Scanner: an error record with a CLI's output in it may be longer
		// than any fixed buffer.
		line, err := br.ReadBytes('\n')
		if line = bytes.TrimSpace(line); len(line) > 0 && line[0] == '{' {
			var l logLine
			if json.Unmarshal(line, &l) == nil && !l.At.IsZero() {
				out = append(out, l)
			}
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("read operator log: %w", err)
		}
	}
}

// readLog parses the log file at path (parseLog).
func readLog(path string) ([]logLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open operator log: %w", err)
	}
	defer f.Close()
	return parseLog(f)
}

// logLines returns the operator's log records so far; none when the log cannot be read (its
// callers count or wait for records, and a log that cannot be read has none to offer).
func (o *operator) logLines() []logLine {
	lines, _ := readLog(o.logPath)
	return lines
}

// countMsg counts log lines with message msg at or after since.
func (o *operator) countMsg(msg string, since time.Time) int {
	n := 0
	for _, l := range o.logLines() {
		if l.Msg == msg && !l.At.Before(since) {
			n++
		}
	}
	return n
}

// waitLog waits for a line with msg about object at or after since.
func (o *operator) waitLog(ctx context.Context, msg, object string, since time.Time, timeout time.Duration) (logLine, error) {
	deadline := time.Now().Add(timeout)
	for {
		for _, l := range o.logLines() {
			if l.Msg == msg && l.Object == object && !l.At.Before(since) {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return logLine{}, fmt.Errorf("no %q line for %s in %s within %s", msg, object, o.logPath, timeout)
		}
		select {
		case <-ctx.Done():
			return logLine{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
