// Command inprocess-engine is an experiment, not part of the operator: it measures a Pulumi up
// through the operator's stack.Manager (CLI path: `stack init` + `pulumi up` processes) against
// the same program run in-process through pkg/v3's DIY backend and engine. See README.md.
//
//	inprocess-engine noop                        do nothing (GODEBUG=inittrace=1 package-init cost)
//	inprocess-engine kdf N                       time the passphrase key derivation N times
//	inprocess-engine bench -kubeconfig F ...     A/B benchmark (README.md "Figures")
//	inprocess-engine cancel -kubeconfig F ...    cancel an in-process up mid-way, check state and lock
//
// bench and cancel take -repo (the pulumi-operator checkout; default: found from the working
// directory) and -out (state, work directories and results; default <repo>/.local/inprocess-engine).
// They use <repo>/bin/pulumi, <repo>/bin/pulumi-home and the sample
// <repo>/config/samples/groupsp_v1_kindcustomhttp.yaml. Source env.sh first (run.sh does).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/pulumi/pulumi/pkg/v3/backend"
	"github.com/pulumi/pulumi/pkg/v3/secrets"
	"github.com/pulumi/pulumi/pkg/v3/secrets/passphrase"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/infra"
	"github.com/pulumi-operator/pulumi-operator/stack"
)

const (
	project = "kindcustomhttp"
	phrase  = "inproc-test-passphrase"
	// experimentDir is where this module lives inside the repo; findRepo looks for it.
	experimentDir = "hack/experiments/inprocess-engine"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: inprocess-engine noop|kdf|bench|cancel")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "noop":
		return
	case "kdf":
		err = kdf(os.Args[2:])
	case "bench":
		err = bench(os.Args[2:])
	case "cancel":
		err = cancelTest(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// ---- where things are

// locations are the files and directories bench and cancel use: everything is derived from the
// repo root and the output directory, so the experiment runs in any clone.
type locations struct {
	repo       string // the pulumi-operator checkout
	out        string // state, work directories and results of this experiment
	kubeconfig string // the cluster's kubeconfig, handed to the provider per update
}

// addLocationFlags registers -repo, -out and -kubeconfig on fs; call resolve after fs.Parse.
func addLocationFlags(fs *flag.FlagSet) *locations {
	l := &locations{}
	fs.StringVar(&l.repo, "repo", "", "root of the pulumi-operator checkout (default: the directory above the working directory that holds "+experimentDir+")")
	fs.StringVar(&l.out, "out", "", "directory for state, work directories and results (default <repo>/.local/inprocess-engine)")
	fs.StringVar(&l.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	return l
}

// resolve fills the defaults, makes every path absolute and creates the output directory.
func (l *locations) resolve() error {
	if l.kubeconfig == "" {
		return errors.New("-kubeconfig is required")
	}
	if l.repo == "" {
		r, err := findRepo()
		if err != nil {
			return err
		}
		l.repo = r
	}
	if l.out == "" {
		l.out = filepath.Join(l.repo, ".local", "inprocess-engine")
	}
	for _, p := range []*string{&l.repo, &l.out, &l.kubeconfig} {
		abs, err := filepath.Abs(*p)
		if err != nil {
			return err
		}
		*p = abs
	}
	return os.MkdirAll(l.out, 0o755)
}

// findRepo walks up from the working directory to the first directory that holds this
// experiment (from the experiment's own directory that is three levels up).
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, experimentDir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s above the working directory: run from the repo or pass -repo", experimentDir)
		}
		dir = parent
	}
}

// sample is the KindCustomHttp sample whose spec both paths deploy.
func (l *locations) sample() string {
	return filepath.Join(l.repo, "config", "samples", "groupsp_v1_kindcustomhttp.yaml")
}

// pulumi is the pinned CLI that path A runs (make tools builds it).
func (l *locations) pulumi() string { return filepath.Join(l.repo, "bin", "pulumi") }

// pulumiHome holds the Kubernetes provider plugin (make plugins installs it).
func (l *locations) pulumiHome() string { return filepath.Join(l.repo, "bin", "pulumi-home") }

// dir is the directory name under the output directory, created if missing.
func (l *locations) dir(name string) (string, error) {
	d := filepath.Join(l.out, name)
	return d, os.MkdirAll(d, 0o700)
}

// ---- measurement helpers

func cpuOf(who int) float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}

type sample struct {
	Wall     float64 `json:"wall"`
	CPUSelf  float64 `json:"cpuSelf"`
	CPUChild float64 `json:"cpuChildren"`
	CPU      float64 `json:"cpu"`
	KDF      int64   `json:"kdf,omitempty"`
	KDFSecs  float64 `json:"kdfSeconds,omitempty"`
	Changes  string  `json:"changes"`
	// Goroutines alive after the operation (a leak per update shows as growth).
	Goroutines int    `json:"goroutines"`
	VmRSS      string `json:"vmRSS"`
}

func measure(f func() (string, error)) (sample, error) {
	s0, c0 := cpuOf(syscall.RUSAGE_SELF), cpuOf(syscall.RUSAGE_CHILDREN)
	t0 := time.Now()
	ch, err := f()
	s := sample{Wall: time.Since(t0).Seconds(), CPUSelf: cpuOf(syscall.RUSAGE_SELF) - s0, CPUChild: cpuOf(syscall.RUSAGE_CHILDREN) - c0, Changes: ch}
	s.CPU = s.CPUSelf + s.CPUChild
	s.Goroutines, s.VmRSS = runtime.NumGoroutine(), procStatus("VmRSS")
	return s, err
}

func procStatus(key string) string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, key+":") {
			return strings.TrimSpace(strings.TrimPrefix(l, key+":"))
		}
	}
	return ""
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtChanges(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, ",")
}

// ---- the program

func desired(sample, ns, name string, replicas int32) (api.Desired, error) {
	docs, err := api.LoadDocuments([]string{sample}, api.LoadOptions{})
	if err != nil {
		return api.Desired{}, err
	}
	d := docs[0].Desired
	d.Namespace, d.Name, d.ReplicaCount = ns, name, replicas
	return d, nil
}

func program(sample, ns, name string, replicas int32) (pulumi.RunFunc, error) {
	d, err := desired(sample, ns, name, replicas)
	if err != nil {
		return nil, err
	}
	return infra.Program(d), nil
}

func ensureNamespace(ctx context.Context, cs *kubernetes.Clientset, ns string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// ---- kdf

func kdf(args []string) error {
	n := 3
	if len(args) > 0 {
		fmt.Sscan(args[0], &n)
	}
	var newT, getT, hitT []float64
	for i := 0; i < n; i++ {
		t0 := time.Now()
		state, _, err := passphrase.NewPassphraseSecretsManager(phrase)
		if err != nil {
			return err
		}
		newT = append(newT, time.Since(t0).Seconds())
		t0 = time.Now()
		if _, err := passphrase.GetPassphraseSecretsManager(phrase, state); err != nil { // cache miss: derives
			return err
		}
		getT = append(getT, time.Since(t0).Seconds())
		t0 = time.Now()
		if _, err := passphrase.GetPassphraseSecretsManager(phrase, state); err != nil { // cache hit
			return err
		}
		hitT = append(hitT, time.Since(t0).Seconds())
	}
	out, _ := json.Marshal(map[string]any{"NewPassphraseSecretsManager": newT, "GetPassphraseSecretsManager_miss": getT, "GetPassphraseSecretsManager_hit": hitT,
		"cpuSelf": cpuOf(syscall.RUSAGE_SELF)})
	fmt.Println(string(out))
	return nil
}

// ---- bench

type results struct {
	ACreate, BCreate, AChange, BChange []sample
	BSecondUpdate                      []sample // a no-op re-up of the just-changed stack, same process, same sm/backend
	BGetStackFresh                     []sample // opening an existing stack whose secrets manager this process has not seen
	Destroy                            []sample
	Notes                              []string
	VmHWM, VmRSS                       string
	StartVmHWM                         string
}

func bench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	loc := addLocationFlags(fs)
	samples := fs.Int("samples", 5, "samples")
	warmup := fs.Int("warmup", 1, "warm-up rounds")
	only := fs.String("only", "", "A or B: run only that path (for a clean peak RSS)")
	resultsFile := fs.String("results", "", "results file (default <out>/results.json)")
	prefix := fs.String("prefix", "s", "namespace prefix")
	_ = fs.Parse(args)
	if err := loc.resolve(); err != nil {
		return err
	}
	if *resultsFile == "" {
		*resultsFile = filepath.Join(loc.out, "results.json")
	}
	stateCLI, err := loc.dir("state-cli")
	if err != nil {
		return err
	}
	workCLI, err := loc.dir("work-cli")
	if err != nil {
		return err
	}
	stateInproc, err := loc.dir("state-inproc")
	if err != nil {
		return err
	}
	workInproc, err := loc.dir("work-inproc")
	if err != nil {
		return err
	}
	ctx := context.Background()
	res := &results{StartVmHWM: procStatus("VmHWM")}

	cfg, err := clientcmd.BuildConfigFromFlags("", loc.kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pluginEnv := map[string]string{"KUBECONFIG": loc.kubeconfig}
	for k, v := range infra.ProviderEnv() {
		pluginEnv[k] = v
	}

	var m *stack.Manager
	if *only != "B" {
		m, err = stack.New(stack.Config{
			Project: project, BackendURL: "file://" + stateCLI, WorkRoot: workCLI,
			PulumiPath: loc.pulumi(), PulumiHome: loc.pulumiHome(), ClusterName: "inproc",
			Env: map[string]string{"PULUMI_CONFIG_PASSPHRASE": phrase, "KUBECONFIG": loc.kubeconfig},
		})
		if err != nil {
			return err
		}
	}
	var ip *inproc
	if *only != "A" {
		ip, err = newInproc(ctx, project, "file://"+stateInproc, workInproc, phrase, pluginEnv)
		if err != nil {
			return err
		}
	}

	runA := func(ns, name string, replicas int32) (string, error) {
		p, err := program(loc.sample(), ns, name, replicas)
		if err != nil {
			return "", err
		}
		sn, err := m.StackName(ns, name)
		if err != nil {
			return "", err
		}
		r, err := m.Up(ctx, sn, p, stack.RunOptions{})
		return fmtChanges(r.Changes) + " outputs=" + fmt.Sprint(len(r.Outputs)), err
	}
	bStacks := map[string]*ipStack{}
	runBCreate := func(ns, name string) (string, error) {
		p, err := program(loc.sample(), ns, name, 1)
		if err != nil {
			return "", err
		}
		st, sm, err := ip.createStack(ctx, "inproc-"+ns+"-"+name)
		if err != nil {
			return "", fmt.Errorf("create stack: %w", err)
		}
		bStacks[ns] = &ipStack{st: st, sm: sm}
		o, err := ip.run(ctx, opUp, st, sm, p)
		return fmtChanges(o.changes) + " outputs=" + fmt.Sprint(len(o.outputs)), err
	}
	runBUp := func(ns, name string, replicas int32) (string, error) {
		p, err := program(loc.sample(), ns, name, replicas)
		if err != nil {
			return "", err
		}
		s := bStacks[ns]
		o, err := ip.run(ctx, opUp, s.st, s.sm, p)
		return fmtChanges(o.changes) + " outputs=" + fmt.Sprint(len(o.outputs)), err
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(os.Stderr, time.Now().UTC().Format("15:04:05 ")+format+"\n", a...)
	}
	do := func(what string, dst *[]sample, keep bool, f func() (string, error)) error {
		kc, ks := ip.kdfStats()
		s, err := measure(f)
		kc2, ks2 := ip.kdfStats()
		s.KDF, s.KDFSecs = kc2-kc, ks2-ks
		logf("%-28s wall %.2f s cpu %.2f (self %.2f children %.2f) kdf %d (%.2f s) %s goroutines %d rss %s err=%v", what, s.Wall, s.CPU, s.CPUSelf, s.CPUChild, s.KDF, s.KDFSecs, s.Changes, s.Goroutines, s.VmRSS, err)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if keep {
			*dst = append(*dst, s)
		}
		return nil
	}

	name := "kindcustomhttp-sample"
	for i := 0; i < *warmup+*samples; i++ {
		keep := i >= *warmup
		nsA, nsB := fmt.Sprintf("%s-a-%d", *prefix, i), fmt.Sprintf("%s-b-%d", *prefix, i)
		for _, ns := range []string{nsA, nsB} {
			if err := ensureNamespace(ctx, cs, ns); err != nil {
				return err
			}
		}
		stepA := func() error {
			if m == nil {
				return nil
			}
			if err := do(fmt.Sprintf("A create+up %d", i), &res.ACreate, keep, func() (string, error) { return runA(nsA, name, 1) }); err != nil {
				return err
			}
			return do(fmt.Sprintf("A change 1->2 %d", i), &res.AChange, keep, func() (string, error) { return runA(nsA, name, 2) })
		}
		stepB := func() error {
			if ip == nil {
				return nil
			}
			if err := do(fmt.Sprintf("B create+up %d", i), &res.BCreate, keep, func() (string, error) { return runBCreate(nsB, name) }); err != nil {
				return err
			}
			if err := do(fmt.Sprintf("B change 1->2 %d", i), &res.BChange, keep, func() (string, error) { return runBUp(nsB, name, 2) }); err != nil {
				return err
			}
			return do(fmt.Sprintf("B 2nd update (no-op) %d", i), &res.BSecondUpdate, keep, func() (string, error) { return runBUp(nsB, name, 2) })
		}
		// alternate the order: A first on even rounds, B first on odd ones
		first, second := stepA, stepB
		if i%2 == 1 {
			first, second = stepB, stepA
		}
		if err := first(); err != nil {
			return err
		}
		if err := second(); err != nil {
			return err
		}
	}
	if ip != nil {
		// Opening an existing stack with a fresh backend object and an empty secrets-manager cache
		// (what a restarted operator does): one key derivation per stack.
		ip2, err := newInproc(ctx, project, "file://"+stateInproc, workInproc, phrase, pluginEnv)
		if err != nil {
			return err
		}
		for i := *warmup; i < *warmup+*samples; i++ {
			nsB := fmt.Sprintf("%s-b-%d", *prefix, i)
			if err := do(fmt.Sprintf("B fresh open+no-op up %d", i), &res.BGetStackFresh, true, func() (string, error) {
				ip.kdfCount.Store(0)
				st, sm, err := ip2.getStack(ctx, "inproc-"+nsB+"-"+name)
				if err != nil {
					return "", err
				}
				p, err := program(loc.sample(), nsB, name, 2)
				if err != nil {
					return "", err
				}
				o, err := ip2.run(ctx, opUp, st, sm, p)
				return fmt.Sprintf("%s kdf(ip2)=%d %.2fs", fmtChanges(o.changes), ip2.kdfCount.Load(), ip2.kdfSeconds.get()), err
			}); err != nil {
				return err
			}
		}
		// Destroy + remove one stack in-process (the API sequence works end to end).
		nsB := fmt.Sprintf("%s-b-%d", *prefix, 0)
		s := bStacks[nsB]
		if err := do("B destroy+rm", &res.Destroy, true, func() (string, error) {
			o, err := ip.run(ctx, opDestroy, s.st, s.sm, func(*pulumi.Context) error { return nil })
			if err != nil {
				return "", err
			}
			_, err = ip.b.RemoveStack(context.Background(), s.st, false, true)
			return fmtChanges(o.changes), err
		}); err != nil {
			return err
		}
	}
	if os.Getenv("INPROC_GOROUTINES") != "" {
		f, err := os.Create(os.Getenv("INPROC_GOROUTINES"))
		if err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 2)
			f.Close()
		}
	}
	res.VmHWM, res.VmRSS = procStatus("VmHWM"), procStatus("VmRSS")
	logf("VmHWM %s VmRSS %s", res.VmHWM, res.VmRSS)
	b, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(*resultsFile, b, 0o644)
}

type ipStack struct {
	st backend.Stack
	sm secrets.Manager
}

func (ip *inproc) kdfStats() (int64, float64) {
	if ip == nil {
		return 0, 0
	}
	return ip.kdfCount.Load(), ip.kdfSeconds.get()
}
