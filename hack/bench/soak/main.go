// Command soak is `make soak`: months of updates in an hour. It runs `pulumi-operator watch` as a
// separate process on the local simulated cluster (file backend, the engine host beside it, the
// real Kubernetes provider plugin), changes a few KindCustomHttp objects over and over (each
// change one up) until thousands of updates have run, and samples what a year left alone would
// show growing: the state directory's bytes and files, the operator's and the engine host's
// resident memory, goroutines and open file descriptors, the operator's temporary files. It
// writes .local/soak/soak.json and its section of docs/benchmarks.md (between soakBegin and
// soakEnd; `make bench` keeps it). Not a test: `make test` never runs it; a figure that grows
// is reported, not failed.
//
// Every loop is bounded by --updates and --budget; the only traffic is to the local cluster's
// API server and the operator's metrics, on 127.0.0.1.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// The markers around the soak's section of docs/benchmarks.md. Their text is matched as it
// stands in docs/benchmarks.md: the same constants are in hack/bench/main.go, whose keepSections keeps
// the section when `make bench` rewrites the doc.
const (
	soakBegin = "<!-- soak: written by make soak (hack/soak); make bench keeps it -->"
	soakEnd   = "<!-- /soak -->"
)

// namespace is where the soak's objects live.
const namespace = "soak"

// Sample is one reading, taken after Updates updates.
type Sample struct {
	Updates      int     `json:"updates"`
	Seconds      float64 `json:"seconds"`
	StateBytes   int64   `json:"stateBytes"`
	StateFiles   int     `json:"stateFiles"`
	OperatorRSS  int64   `json:"operatorRSSKiB"`
	HostRSS      int64   `json:"engineHostRSSKiB"` // 0 when no engine host ran at that moment
	Goroutines   int     `json:"operatorGoroutines"`
	OperatorFDs  int     `json:"operatorFDs"`
	HostFDs      int     `json:"engineHostFDs"`
	HostThreads  int     `json:"engineHostThreads"`
	Processes    int     `json:"processes"` // the operator's whole tree
	TmpEntries   int     `json:"tmpEntries"`
	HistoryFiles int     `json:"historyFiles"` // history and backup files of the first object's stack
}

// Result is soak.json.
type Result struct {
	Date        time.Time `json:"date"`
	Commit      string    `json:"commit"`
	Objects     int       `json:"objects"`
	Workers     int       `json:"workers"`
	KeepHistory int       `json:"keepHistory"`
	Updates     int       `json:"updates"`
	Failed      int       `json:"failedReconciles"`
	Seconds     float64   `json:"seconds"`
	Samples     []Sample  `json:"samples"`
}

func main() { os.Exit(run()) }

func run() int {
	fl := flag.NewFlagSet("soak", flag.ContinueOnError)
	repo := fl.String("repo", ".", "repository root")
	kubeconfig := fl.String("kubeconfig", "", "kubeconfig of the local cluster to run on")
	operatorBin := fl.String("operator", "bin/pulumi-operator", "the operator binary (its engine host beside it)")
	pulumi := fl.String("pulumi", "bin/pulumi", "the pinned pulumi CLI")
	out := fl.String("out", ".local/soak", "directory for soak.json, the operator's log and state")
	docs := fl.String("docs", "docs/benchmarks.md", "Markdown file whose soak section to write; empty for none")
	updates := fl.Int("updates", 2000, "updates to run (each a spec change and its up)")
	objects := fl.Int("objects", 10, "objects changed in turn")
	workers := fl.Int("workers", 2, "--workers of the operator")
	keep := fl.Int("keep-history", 10, "--keep-history of the operator")
	every := fl.Int("sample-every", 100, "updates between samples")
	budget := fl.Duration("budget", 90*time.Minute, "time the run may take")
	if err := fl.Parse(os.Args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *budget)
	defer cancel()
	s := &soak{repo: *repo, out: *out, objects: *objects}
	res, err := s.run(ctx, *kubeconfig, *operatorBin, *pulumi, *workers, *keep, *updates, *every)
	if res != nil {
		b, _ := json.MarshalIndent(res, "", "  ")
		_ = os.WriteFile(filepath.Join(*out, "soak.json"), append(b, '\n'), 0o644)
		fmt.Print(report(res))
		if *docs != "" && len(res.Samples) >= 2 {
			if werr := writeSection(*docs, report(res)); werr != nil {
				fmt.Fprintln(os.Stderr, "soak: write docs:", werr)
				return 1
			}
			fmt.Println("docs:", *docs)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	return 0
}

type soak struct {
	repo, out string
	objects   int
	dyn       dynamic.Interface
	op        *exec.Cmd
	metrics   string
	stateDir  string
	tmpDir    string
}

func (s *soak) run(ctx context.Context, kubeconfig, operatorBin, pulumi string, workers, keep, updates, every int) (*Result, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig: %w", err)
	}
	if s.dyn, err = dynamic.NewForConfig(rc); err != nil {
		return nil, err
	}
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	s.stateDir, s.tmpDir = filepath.Join(s.out, "state"), filepath.Join(s.out, "tmp")
	_ = os.RemoveAll(s.stateDir)
	_ = os.RemoveAll(s.tmpDir)
	if err := os.MkdirAll(s.tmpDir, 0o700); err != nil {
		return nil, err
	}
	if err := s.startOperator(ctx, kubeconfig, operatorBin, pulumi, workers, keep); err != nil {
		return nil, err
	}
	defer s.stopOperator()
	res := &Result{Date: time.Now().UTC(), Commit: commit(s.repo), Objects: s.objects, Workers: workers, KeepHistory: keep}
	start := time.Now()
	names := make([]string, s.objects)
	for i := range names {
		names[i] = fmt.Sprintf("soak-%d", i)
		if err := s.create(ctx, names[i]); err != nil {
			return res, err
		}
	}
	if err := s.waitReady(ctx, names); err != nil {
		return res, fmt.Errorf("the objects never became Ready: %w", err)
	}
	for round := 1; res.Updates < updates; round++ {
		for _, n := range names {
			if err := s.change(ctx, n, round); err != nil {
				return res, err
			}
		}
		if err := s.waitReady(ctx, names); err != nil {
			return res, fmt.Errorf("round %d: %w", round, err)
		}
		before := res.Updates
		res.Updates += len(names)
		res.Seconds = time.Since(start).Seconds()
		if res.Updates/every != before/every || res.Updates >= updates {
			sm := s.sample(res.Updates, time.Since(start), names[0])
			res.Samples = append(res.Samples, sm)
			fmt.Printf("soak: %d updates, %.0f s: state %d KiB in %d files, operator %d KiB, engine host %d KiB, goroutines %d, fds %d/%d, tmp %d\n",
				sm.Updates, sm.Seconds, sm.StateBytes/1024, sm.StateFiles, sm.OperatorRSS, sm.HostRSS, sm.Goroutines, sm.OperatorFDs, sm.HostFDs, sm.TmpEntries)
		}
	}
	res.Failed = int(s.metric("pulumi_operator_reconciles_total", `result="error"`))
	return res, nil
}

// setup installs the CRD and the namespace.
func (s *soak) setup(ctx context.Context) error {
	b, err := os.ReadFile(filepath.Join(s.repo, "config", "crd", "groupsp.measutosh.dev_kindcustomhttps.yaml"))
	if err != nil {
		return err
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(b, &crd.Object); err != nil {
		return err
	}
	c := s.dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := c.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("install CRD: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := s.dyn.Resource(api.GroupVersionResource).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("CRD not served: %w", err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}}}
	if _, err := s.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("create namespace: %w", err)
	}
	return nil
}

// startOperator runs the operator with its own state and temporary directories and metrics on
// a free loopback port, and waits for its readiness.
func (s *soak) startOperator(ctx context.Context, kubeconfig, bin, pulumi string, workers, keep int) error {
	metricsAddr, healthAddr := freeAddr(), freeAddr()
	s.metrics = "http://" + metricsAddr + "/metrics"
	logf, err := os.Create(filepath.Join(s.out, "operator.log"))
	if err != nil {
		return err
	}
	s.op = exec.Command(bin, "--kubeconfig", kubeconfig, "--state-dir", s.stateDir, "--cluster-name", "soak", "--pulumi", pulumi,
		"--project-file", filepath.Join(s.repo, "Pulumi.yaml"), "--keep-history", strconv.Itoa(keep), "--log-format", "json",
		"watch", "--namespace", namespace, "--workers", strconv.Itoa(workers), "--metrics-addr", metricsAddr, "--health-addr", healthAddr)
	s.op.Env = append(os.Environ(), "PULUMI_CONFIG_PASSPHRASE=soak", "PULUMI_BACKEND_URL=", "TMPDIR="+s.tmpDir)
	s.op.Stdout, s.op.Stderr = logf, logf
	if err := s.op.Start(); err != nil {
		return fmt.Errorf("start operator: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (s *soak) stopOperator() {
	if s.op == nil || s.op.Process == nil {
		return
	}
	_ = s.op.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.op.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = s.op.Process.Kill()
	}
}

func (s *soak) create(ctx context.Context, name string) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": api.GroupVersion.String(), "kind": "KindCustomHttp",
		"metadata": map[string]any{"name": name, "namespace": namespace},
		"spec":     map[string]any{"replicaCount": int64(1), "port": int64(80), "configMapData": map[string]any{"round": "0"}},
	}}
	_, err := s.dyn.Resource(api.GroupVersionResource).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{})
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("create %s: it exists already: run the soak on a cluster of its own (make soak starts one)", name)
	}
	return err
}

// change makes the object's next up: a configMapData value, which rolls its pod too.
func (s *soak) change(ctx context.Context, name string, round int) error {
	patch := fmt.Appendf(nil, `{"spec":{"configMapData":{"round":"%d"}}}`, round)
	_, err := s.dyn.Resource(api.GroupVersionResource).Namespace(namespace).Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{})
	return err
}

// waitReady waits until every object is Ready at its current generation (10 minutes at most).
func (s *soak) waitReady(ctx context.Context, names []string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := s.dyn.Resource(api.GroupVersionResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, u := range l.Items {
			cr, err := api.FromUnstructured(&u)
			if err != nil || !slices.Contains(names, cr.Name) {
				continue
			}
			for _, c := range cr.Status.Conditions {
				if c.Type == "Ready" && c.Status == metav1.ConditionTrue && c.ObservedGeneration == cr.Generation && cr.Status.ObservedGeneration == cr.Generation {
					ready++
				}
			}
		}
		return ready == len(names), nil
	})
}

// sample reads every figure now.
func (s *soak) sample(updates int, elapsed time.Duration, first string) Sample {
	sm := Sample{Updates: updates, Seconds: elapsed.Seconds()}
	_ = filepath.WalkDir(s.stateDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			sm.StateBytes += fi.Size()
			sm.StateFiles++
		}
		if strings.Contains(p, string(filepath.Separator)+"history"+string(filepath.Separator)) ||
			strings.Contains(p, string(filepath.Separator)+"backups"+string(filepath.Separator)) {
			if strings.Contains(p, "soak."+namespace+"."+first+string(filepath.Separator)) && !strings.HasSuffix(p, ".attrs") {
				sm.HistoryFiles++
			}
		}
		return nil
	})
	pid := s.op.Process.Pid
	sm.OperatorRSS, sm.OperatorFDs, _ = procFigures(pid)
	sm.Goroutines = int(s.metric("go_goroutines", ""))
	below := tree(pid)
	sm.Processes = len(below) + 1
	for p, name := range below {
		if name == "pulumi-operator-engine" {
			rss, fds, threads := procFigures(p)
			sm.HostRSS, sm.HostFDs, sm.HostThreads = sm.HostRSS+rss, sm.HostFDs+fds, sm.HostThreads+threads
		}
	}
	sm.TmpEntries = countDir(s.tmpDir)
	return sm
}

// metric sums the samples of the operator's metric name whose labels contain match.
func (s *soak) metric(name, match string) float64 {
	resp, err := http.Get(s.metrics)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != ' ' && line[len(name)] != '{') {
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// procFigures are what sample reads of one process through procfs: resident memory in KiB,
// open file descriptors, threads; zeros when the process is gone.
func procFigures(pid int) (rssKiB int64, fds, threads int) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, 0, 0
	}
	if st, err := p.Stat(); err == nil {
		rssKiB, threads = int64(st.ResidentMemory()/1024), st.NumThreads
	}
	fds, _ = p.FileDescriptorsLen()
	return rssKiB, fds, threads
}

func countDir(dir string) int {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	return len(entries)
}

// tree lists pid's descendants by the base name of their argv[0] (procfs' parent links).
func tree(pid int) map[int]string {
	procs, err := procfs.AllProcs()
	if err != nil {
		return nil
	}
	children, names := map[int][]int{}, map[int]string{}
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], p.PID)
		if argv, err := p.CmdLine(); err == nil && len(argv) > 0 {
			names[p.PID] = filepath.Base(argv[0])
		}
	}
	out := map[int]string{}
	for q := children[pid]; len(q) > 0; q = q[1:] {
		out[q[0]] = names[q[0]]
		q = append(q, children[q[0]]...)
	}
	return out
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

// commit is the repository's HEAD, "-dirty" when the tree has changes.
func commit(repo string) string {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += "-dirty"
	}
	return c
}

// writeSection puts section between the soak markers of the Markdown file path (appended when
// the file has none).
func writeSection(path, section string) error {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(b)
	block := soakBegin + "\n" + section + soakEnd + "\n"
	if i, j := strings.Index(doc, soakBegin), strings.Index(doc, soakEnd); i >= 0 && j > i {
		doc = doc[:i] + block + doc[j+len(soakEnd)+1:]
	} else {
		doc = strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	return os.WriteFile(path, []byte(doc), 0o644)
}
