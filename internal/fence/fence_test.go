package fence

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pulumi-operator/pulumi-operator/agent/protocol"
)

// childEnv makes the test binary a process under a lease (TestMain): it takes the lease as the
// agent's binary does (protocol.WatchLease) and exits 42 when it expires, else in a minute.
const childEnv = "FENCE_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		ok, err := protocol.WatchLease(os.Getenv, func() { os.Exit(42) })
		if err != nil || !ok {
			os.Stderr.WriteString("no lease: " + errString(err) + "\n")
			os.Exit(3)
		}
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// Validate takes client-go's order and the fence's margin, and its message shows the arithmetic
// and what to set.
func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		lease, renew, retry time.Duration
		want                string // "" for valid
	}{
		"defaults":              {15 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		"exactly the margin":    {13 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		"no margin":             {12 * time.Second, 10 * time.Second, 2 * time.Second, "= 2s leaves no room to fence"},
		"what to set":           {12 * time.Second, 10 * time.Second, 2 * time.Second, "raise the lease duration to at least 13s or lower the renew deadline to at most 9s"},
		"renew not below lease": {10 * time.Second, 10 * time.Second, 2 * time.Second, "want 0 < --leader-election-retry-period"},
		"retry not below renew": {15 * time.Second, 2 * time.Second, 2 * time.Second, "want 0 < --leader-election-retry-period"},
		"zero retry":            {15 * time.Second, 10 * time.Second, 0, "want 0 <"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Validate(tc.lease, tc.renew, tc.retry)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// clock is a fake monotonic clock for the fence.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() int64              { return c.ns.Load() }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// newFake is a fence on a fake clock that starts at 1000 s.
func newFake(renewDeadline time.Duration) (*Fence, *clock) {
	c := &clock{}
	c.ns.Store(int64(1000 * time.Second))
	f := New(renewDeadline)
	f.now = c.now
	return f, c
}

// The permission: none before the first renewal, until send time + renew deadline after each,
// never again once expired or revoked (a late renewal does not bring it back).
func TestCheck(t *testing.T) {
	f, c := newFake(10 * time.Second)
	if err := f.Check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("before the first renewal: Check = %v, want ErrFenced", err)
	}
	sent := f.Now()
	c.advance(300 * time.Millisecond) // the request's round trip
	f.Renewed(sent)
	c.advance(9600 * time.Millisecond)
	if err := f.Check(); err != nil {
		t.Fatalf("9.9 s after the renewal was sent: Check = %v, want nil", err)
	}
	c.advance(200 * time.Millisecond)
	err := f.Check()
	if !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "sent 10.1s ago, more than the renew deadline 10s") {
		t.Fatalf("10.1 s after: Check = %v, want ErrFenced saying why", err)
	}
	f.checkExpiry() // what the timer does
	select {
	case <-f.Expired():
	default:
		t.Fatal("Expired not closed past the deadline")
	}
	f.Renewed(f.Now()) // a renewal that got through late
	if err := f.Check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("after a late renewal: Check = %v, want ErrFenced for good", err)
	}

	g, _ := newFake(10 * time.Second)
	g.Renewed(g.Now())
	g.Revoke()
	if err := g.Check(); !errors.Is(err, ErrFenced) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("after Revoke: Check = %v", err)
	}
	var none *Fence
	if err := none.Check(); err != nil {
		t.Fatalf("nil fence: Check = %v, want nil", err)
	}
}

// A renewal whose deadline would already have passed when it is recorded is too late: the
// fence expires instead of being extended from an old send time.
func TestRenewedTooLate(t *testing.T) {
	f, c := newFake(10 * time.Second)
	f.Renewed(f.Now())
	sent := f.Now()
	c.advance(11 * time.Second) // the renewal took 11 s to come back
	f.Renewed(sent)
	if err := f.Check(); !errors.Is(err, ErrFenced) {
		t.Fatalf("Check = %v, want ErrFenced", err)
	}
}

// startChild starts the test binary under f as a process holding a lease (childEnv) and returns
// a channel receiving its exit code and when it exited.
func startChild(t *testing.T, f *Fence) (*exec.Cmd, <-chan exit) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	started, exited, err := f.Attach(cmd)
	if err != nil {
		t.Fatal(err)
	}
	err = cmd.Start()
	started()
	if err != nil {
		exited()
		t.Fatal(err)
	}
	ch := make(chan exit, 1)
	go func() {
		_ = cmd.Wait()
		exited()
		ch <- exit{cmd.ProcessState.ExitCode(), time.Now()}
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, ch
}

type exit struct {
	code int
	at   time.Time
}

// A process under the lease follows every renewal and ends itself at the last one's deadline +
// KillAfter when no more come, with no help from the operator (which, paused, could not give
// any): the operator stops renewing here and never kills it. A revoke ends it KillAfter later
// (its operation's graceful stop). Once the deadline has passed, no process can be attached.
func TestProcessEndsAtItsLease(t *testing.T) {
	if !protocol.LeaseSupported {
		t.Skip("SKIP: no lease on this platform (Linux only)")
	}
	const renew = 600 * time.Millisecond
	f := New(renew)
	f.Renewed(f.Now())
	_, ch := startChild(t, f)
	var last time.Time
	for range 5 { // renewals keep it alive well past one deadline
		time.Sleep(renew / 2)
		last = time.Now()
		f.Renewed(f.Now())
	}
	select {
	case e := <-ch:
		t.Fatalf("the process ended (code %d) while its lease was renewed", e.code)
	case <-time.After(renew / 2):
	}
	e := <-ch
	took := e.at.Sub(last)
	t.Logf("the process ended itself %s after the last renewal (renew deadline %s + kill after %s)", took.Round(time.Millisecond), renew, KillAfter)
	if e.code != 42 {
		t.Fatalf("exit code %d, want 42 (its lease expired)", e.code)
	}
	if want := renew + KillAfter; took < want-50*time.Millisecond || took > want+500*time.Millisecond {
		t.Errorf("ended %s after the last renewal, want about %s", took, want)
	}
	if _, _, err := f.Attach(exec.Command("true")); !errors.Is(err, ErrFenced) {
		t.Errorf("Attach after the deadline = %v, want ErrFenced", err)
	}

	g := New(time.Minute)
	g.Renewed(g.Now())
	_, ch = startChild(t, g)
	time.Sleep(300 * time.Millisecond)
	revoked := time.Now()
	g.Revoke()
	e = <-ch
	if took := e.at.Sub(revoked); e.code != 42 || took < KillAfter-50*time.Millisecond || took > KillAfter+500*time.Millisecond {
		t.Fatalf("after Revoke: exit code %d %s later, want 42 after KillAfter (%s), the graceful stop's time", e.code, took, KillAfter)
	}
}

// A process whose lease descriptor is wrong refuses to run rather than run without the lease
// it was meant to have.
func TestWatchLeaseErrors(t *testing.T) {
	if !protocol.LeaseSupported {
		t.Skip("SKIP: no lease on this platform (Linux only)")
	}
	for name, tc := range map[string]struct{ fd, want string }{
		"not a number":    {"x", "want a file descriptor number"},
		"stdio":           {"1", "want a file descriptor number of at least 3"},
		"closed":          {"97", "read the first lease deadline"},
		"nothing in it":   {"empty", "read the first lease deadline"},
		"unset: no lease": {"", ""},
	} {
		t.Run(name, func(t *testing.T) {
			fd := tc.fd
			if fd == "empty" {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				w.Close()
				defer r.Close()
				fd = strconv.Itoa(int(r.Fd()))
			}
			ok, err := protocol.WatchLease(func(k string) string {
				if k == protocol.LeaseFDEnv {
					return fd
				}
				return ""
			}, func() { t.Error("expired") })
			if tc.want == "" {
				if ok || err != nil {
					t.Fatalf("WatchLease = %v, %v; want no lease, no error", ok, err)
				}
				return
			}
			if ok || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WatchLease = %v, %v; want an error containing %q", ok, err, tc.want)
			}
		})
	}
}
