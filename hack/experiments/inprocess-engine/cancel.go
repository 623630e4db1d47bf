package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pulumi-operator/pulumi-operator/infra"
)

// cancelTest: an in-process up whose Deployment can never become available (more replicas
// than the fake node admits), cancelled through its context after -after; then what the
// backend holds: the error, how long the cancel took, the lock directory, the resources in
// the state and any pending operations.
func cancelTest(args []string) error {
	fs := flag.NewFlagSet("cancel", flag.ExitOnError)
	loc := addLocationFlags(fs)
	after := fs.Duration("after", 6*time.Second, "cancel after")
	replicas := fs.Int("replicas", 400, "replicas (more than the node admits)")
	_ = fs.Parse(args)
	if err := loc.resolve(); err != nil {
		return err
	}
	stateCancel, err := loc.dir("state-cancel")
	if err != nil {
		return err
	}
	workInproc, err := loc.dir("work-inproc")
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", loc.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns, name := fmt.Sprintf("cancel-%d", time.Now().Unix()), "kindcustomhttp-sample"
	if err := ensureNamespace(context.Background(), cs, ns); err != nil {
		return err
	}
	pluginEnv := map[string]string{"KUBECONFIG": loc.kubeconfig}
	for k, v := range infra.ProviderEnv() {
		pluginEnv[k] = v
	}
	ip, err := newInproc(context.Background(), project, "file://"+stateCancel, workInproc, phrase, pluginEnv)
	if err != nil {
		return err
	}
	st, sm, err := ip.createStack(context.Background(), "cancel-"+fmt.Sprint(time.Now().Unix()))
	if err != nil {
		return err
	}
	p, err := program(loc.sample(), ns, name, int32(*replicas))
	if err != nil {
		return err
	}
	ctx, cancelFn := context.WithCancel(context.Background())
	var cancelledAt time.Time
	go func() {
		time.Sleep(*after)
		cancelledAt = time.Now()
		cancelFn()
	}()
	t0 := time.Now()
	o, err := ip.run(ctx, opUp, st, sm, p)
	end := time.Now()
	fmt.Printf("up returned after %.2f s (%.2f s after cancel): changes=%s err=%v\n",
		end.Sub(t0).Seconds(), end.Sub(cancelledAt).Seconds(), fmtChanges(o.changes), err)
	// Lock directory
	lockDir := filepath.Join(stateCancel, ".pulumi", "locks")
	_ = filepath.Walk(lockDir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			b, _ := os.ReadFile(path)
			fmt.Printf("LOCK LEFT: %s %s\n", path, b)
		}
		return nil
	})
	fmt.Println("lock files walked (none listed above = none left)")
	// State
	st2, _, err := ip.getStack(context.Background(), st.Ref().Name().String())
	if err != nil {
		return err
	}
	snap, err := st2.Snapshot(context.Background(), ip)
	if err != nil {
		return err
	}
	for _, r := range snap.Resources {
		fmt.Printf("state resource: %s\n", r.URN)
	}
	for _, po := range snap.PendingOperations {
		fmt.Printf("pending operation: %s %s\n", po.Type, po.Resource.URN)
	}
	return nil
}
