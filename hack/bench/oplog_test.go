package main

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// testdata/operator.log is the operator's JSON log (slog's JSONHandler) with what else lands
// in the same file: a line of a child's output, a blank line, records that are not whole or
// whose fields have other types, and a last line still being written.
func TestReadLog(t *testing.T) {
	lines, err := readLog("testdata/operator.log")
	if err != nil {
		t.Fatalf("readLog: %v", err)
	}
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	want := []logLine{
		{At: at("2026-11-23T14:57:07.864730285Z"), Msg: "watching KindCustomHttp objects"},
		{At: at("2026-11-23T14:57:07.864945392Z"), Msg: "running up", Object: "bench-latency/lat-0", Generation: 1},
		{At: at("2026-11-23T14:57:08.102113004Z"), Msg: "running up", Object: "bench-latency/lat-1", Generation: 1},
		{At: at("2026-11-23T14:57:09.365954362Z"), Msg: "stack up to date", Object: "bench-latency/lat-0", Generation: 1},
		{At: at("2026-11-23T14:57:10.250431871Z"), Msg: "running up", Object: "bench-latency/lat-0", Generation: 2},
	}
	if len(lines) != len(want) {
		t.Fatalf("readLog: %d records, want %d: %+v", len(lines), len(want), lines)
	}
	for i := range want {
		if !lines[i].At.Equal(want[i].At) || lines[i].Msg != want[i].Msg || lines[i].Object != want[i].Object || lines[i].Generation != want[i].Generation {
			t.Errorf("record %d = %+v, want %+v", i, lines[i], want[i])
		}
	}
}

// TestParseLogOfSlog ties the decoder to what the watcher writes: its "running up" and
// "stack up to date" records through slog's JSONHandler, with the same attributes.
func TestParseLogOfSlog(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil)).With("object", "ns/a", "stack", "org/p/s", "generation", int64(3))
	before := time.Now()
	log.Info("running up", "why", "Updated", "refresh", true, "drift", []string{"spec.replicas"})
	log.Info("stack up to date", "changes", map[string]int{"update": 1}, "seconds", 2.5)
	lines, err := parseLog(&buf)
	if err != nil {
		t.Fatalf("parseLog: %v", err)
	}
	if len(lines) != 2 || lines[0].Msg != "running up" || lines[1].Msg != "stack up to date" {
		t.Fatalf("parseLog = %+v, want the two records", lines)
	}
	for _, l := range lines {
		if l.Object != "ns/a" || l.Generation != 3 || l.At.Before(before) {
			t.Errorf("record %+v: want object ns/a, generation 3, a time at or after %s", l, before)
		}
	}
}

func TestReadLogErrors(t *testing.T) {
	if _, err := readLog("testdata/no-such.log"); err == nil || !strings.Contains(err.Error(), "open operator log") {
		t.Errorf("readLog of a missing file: error %v, want open operator log", err)
	}
	broken := errors.New("disk gone")
	lines, err := parseLog(iotest.ErrReader(broken))
	if !errors.Is(err, broken) || len(lines) != 0 {
		t.Errorf("parseLog of a failing reader = %v, %v; want no records and the read error", lines, err)
	}
}

func TestCountMsg(t *testing.T) {
	o := &operator{logPath: "testdata/operator.log"}
	since, _ := time.Parse(time.RFC3339Nano, "2026-11-23T14:57:08.102113004Z")
	if n := o.countMsg("running up", time.Time{}); n != 3 {
		t.Errorf("countMsg(running up) = %d, want 3", n)
	}
	if n := o.countMsg("running up", since); n != 2 {
		t.Errorf("countMsg(running up, since the second) = %d, want 2 (a record at since counts)", n)
	}
	missing := &operator{logPath: "testdata/no-such.log"}
	if n := missing.countMsg("running up", time.Time{}); n != 0 {
		t.Errorf("countMsg of a missing log = %d, want 0", n)
	}
}

func TestWaitLog(t *testing.T) {
	o := &operator{logPath: "testdata/operator.log"}
	since, _ := time.Parse(time.RFC3339Nano, "2026-11-23T14:57:09Z")
	l, err := o.waitLog(context.Background(), "running up", "bench-latency/lat-0", since, time.Second)
	if err != nil || l.Generation != 2 {
		t.Errorf("waitLog = %+v, %v; want the generation 2 record", l, err)
	}
	if _, err := o.waitLog(context.Background(), "stack up to date", "bench-latency/lat-1", time.Time{}, 200*time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), `no "stack up to date" line for bench-latency/lat-1`) {
		t.Errorf("waitLog for a record never written: error %v, want a timeout naming it", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := o.waitLog(ctx, "stack up to date", "bench-latency/lat-1", time.Time{}, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("waitLog with a cancelled context: error %v, want context.Canceled", err)
	}
}
