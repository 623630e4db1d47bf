package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// HoldLock starts up(ctx, program) in the background, an up of an existing stack with a
// program that blocks, and returns once that update certainly holds the stack's lock: its
// program runs (the CLI takes the lock before it runs the program) and the engine has answered
// the program's one registration (so no checkpoint write is under way while the test probes).
// release unblocks the program and returns the update's error, once it ended; the test's end
// releases it too, and waits for it (up to 2 minutes) before the test's directories go.
//
// up is the caller's way to run an up (stack.Manager.Up of the stack, typically): taken as a
// function so that package stack's own tests can use HoldLock without an import cycle.
func HoldLock(t *testing.T, up func(ctx context.Context, program pulumi.RunFunc) error) (release func() error) {
	t.Helper()
	held, unblock := make(chan struct{}), make(chan struct{})
	var heldOnce, unblockOnce sync.Once
	prog := func(ctx *pulumi.Context) error {
		var c pulumi.ResourceState
		if err := ctx.RegisterComponentResource("test:index:LockHolder", "holder", &c); err != nil {
			return err
		}
		// The URN resolves when the engine answers the registration, after it wrote the step.
		c.URN().ApplyT(func(pulumi.URN) int { heldOnce.Do(func() { close(held) }); return 0 })
		<-unblock
		return nil
	}
	finished := make(chan struct{})
	var result error
	go func() {
		result = up(context.Background(), prog)
		close(finished)
	}()
	stop := func() { unblockOnce.Do(func() { close(unblock) }) }
	release = func() error { stop(); <-finished; return result }
	t.Cleanup(func() {
		stop()
		select {
		case <-finished:
		case <-time.After(2 * time.Minute):
		}
	})
	select {
	case <-held:
	case <-finished:
		t.Fatalf("the lock holder's up ended before its program ran: %v", result)
	case <-time.After(2 * time.Minute):
		t.Fatal("the lock holder's program never ran")
	}
	return release
}
