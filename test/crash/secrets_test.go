package crash

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
	"github.com/pulumi-operator/pulumi-operator/stack"
	"github.com/pulumi-operator/pulumi-operator/watcher"
)

// TestPassphraseNeverLeaks runs the operator with a distinctive passphrase (from a file, as a
// mounted Secret gives it), a distinctive database password (in PGPASSWORD, as a Secret gives
// it; the URL in PULUMI_BACKEND_URL) and a planted token of another tool in its environment, and drives an object through create, an invalid
// spec, a failure for a wrong database password (a second operator run with it), a failure for
// a stopped database, recovery and delete. Neither secret, nor the wrong password, may appear in
// the operators' logs, in any version of the object (status) the apiserver held, in any Event,
// on the command line of any process the operator started, or in the environment of one
// (provider plugins included: the database password reaches them as PGPASSFILE, a file in
// memory, stack/credfile.go); nor on disk (secretsAtRest), while
// the stack exists and after it is gone.
//
// It needs PostgreSQL (PULUMI_TEST_POSTGRES_URL says it is set up; the test starts a private
// server with its own password through hack/postgres-up.sh).
func TestPassphraseNeverLeaks(t *testing.T) {
	requirePlugin(t)
	// '!' and '~' are there to be percent-encoded (or not) in the URL: both spellings are looked for.
	dbPassword := "Db!" + randomHex(8) + "~pw"
	wrongPassword := "Wrong!" + randomHex(8)
	passphrase := "Phrase-" + randomHex(8) + " with spaces"
	ciToken := "ci-token-" + randomHex(12)
	pg := startPostgres(t, dbPassword)
	// Every spelling: as set, as hack/postgres-up.sh encodes it in the URL ("!" as %21), and
	// the random part alone, which any spelling contains.
	inURL := pg.url[strings.Index(pg.url, "://")+3:]
	inURL = inURL[strings.Index(inURL, ":")+1 : strings.LastIndex(inURL, "@")]
	secrets := map[string]string{
		"the database password":                     dbPassword,
		"the database password as in the URL":       inURL,
		"the database password's random part":       dbPassword[3:19],
		"the wrong database password":               wrongPassword,
		"the wrong database password's random part": wrongPassword[6:],
		"the passphrase":                            passphrase,
		"the passphrase's random part":              passphrase[7:23],
		// In the operator's environment, but no business of Pulumi's (another tool's token):
		// the operator keeps it to itself (stack.childEnv), so no process it starts has it.
		"the planted CI token": ciToken,
	}
	wrong, err := url.Parse(pg.url)
	if err != nil {
		t.Fatal(err)
	}
	wrong.User = url.UserPassword(wrong.User.Username(), wrongPassword)

	c := testenv.Connect(t)
	c.InstallCRD(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	objects := watchObjects(t, c, ns)
	passFile := filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passFile, []byte(passphrase), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir := t.TempDir()
	cfg := operatorConfig{name: "operator", kubeconfig: c.Kubeconfig, backendURL: pg.url, urlInEnv: true, stateDir: stateDir,
		cluster: "leak", namespace: ns, env: map[string]string{"PULUMI_CONFIG_PASSPHRASE_FILE": passFile, "CI_DEPLOY_TOKEN": ciToken}}
	op := newOperator(t, cfg)
	cfg.name, cfg.backendURL = "wrong-password", wrong.String()
	opWrong := newOperator(t, cfg)
	pgDown := false
	t.Cleanup(func() {
		opWrong.stop()
		if pgDown {
			pg.up(t)
		}
		if op.pid() == 0 {
			op.start()
		}
		deleteAllAndWait(t, c, ns, 3*time.Minute)
	})

	// Command lines and environments of every process the operators start (the CLI, the
	// engine host, the provider plugins, the program), sampled while they run.
	var cmdMu sync.Mutex
	cmdlines := map[string]bool{}
	environs := map[string]bool{}
	pluginEnvirons := 0
	sampling, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			for _, o := range []*operator{op, opWrong} {
				for _, l := range o.processCommandLines() {
					cmdMu.Lock()
					cmdlines[l] = true
					cmdMu.Unlock()
				}
				for cmdline, env := range o.processEnvirons() {
					cmdMu.Lock()
					// The command line first, so that a finding names the process.
					entry := "process " + cmdline + ":\n" + env
					if !environs[entry] && strings.Contains(cmdline, "pulumi-resource-kubernetes") {
						pluginEnvirons++
					}
					environs[entry] = true
					cmdMu.Unlock()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()

	cr := c.Client.Resource(api.GroupVersionResource).Namespace(ns)
	s := spec{replicas: 1, data: map[string]string{"hostports": "a,8080\n"}}
	step := func(what string, s spec) {
		t.Helper()
		if err := patchCR(ctx, c, ns, "leak", s); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// waitCondition waits for condition typ to have status and reason at the current generation.
	waitCondition := func(typ string, status metav1.ConditionStatus, reason string) string {
		t.Helper()
		var msg, last string
		err := wait.PollUntilContextTimeout(ctx, 300*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := cr.Get(ctx, "leak", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			o, err := api.FromUnstructured(u)
			if err != nil {
				return false, err
			}
			for _, cd := range o.Status.Conditions {
				if cd.Type == typ {
					last = string(cd.Status) + " " + cd.Reason + ": " + cd.Message
					if cd.Status == status && cd.Reason == reason && cd.ObservedGeneration == o.Generation {
						msg = cd.Message
						return true, nil
					}
				}
			}
			return false, nil
		})
		if err != nil {
			t.Fatalf("%s never %s %s at the current generation; last: %s", typ, status, reason, last)
		}
		return msg
	}

	// 1. Create: Ready.
	if err := createCR(ctx, c, ns, "leak", s, nil); err != nil {
		t.Fatal(err)
	}
	op.start()
	waitConverged(t, c, ns, map[string]spec{"leak": s}, nil, 3*time.Minute)
	// 2. An invalid spec (a configMapData key that is no file name): Stalled.
	step("invalid spec", spec{replicas: 1, data: map[string]string{"bad/key": "x"}})
	t.Logf("invalid spec: Stalled: %s", waitCondition("Stalled", metav1.ConditionTrue, "InvalidSpec"))
	// 3. Valid again: Ready.
	s = spec{replicas: 2, data: map[string]string{"hostports": "b,8080\n"}}
	step("valid spec", s)
	waitConverged(t, c, ns, map[string]spec{"leak": s}, nil, 3*time.Minute)
	// 4. The wrong database password: the up fails.
	op.stop()
	opWrong.start()
	s.replicas = 3
	step("change under the wrong password", s)
	t.Logf("wrong password: Ready False: %s", waitCondition("Ready", metav1.ConditionFalse, api.ReasonBackendUnavailable))
	opWrong.stop()
	// 5. The database stopped: the up fails.
	pg.down(t)
	pgDown = true
	op.start()
	s.replicas = 1
	step("change with the database down", s)
	t.Logf("database down: Ready False: %s", waitCondition("Ready", metav1.ConditionFalse, api.ReasonBackendUnavailable))
	// 6. The database back: Ready.
	pg.up(t)
	pgDown = false
	waitConverged(t, c, ns, map[string]spec{"leak": s}, nil, 3*time.Minute)
	stackName, err := stack.Name("leak", ns, "leak")
	if err != nil {
		t.Fatal(err)
	}
	atRest := secretsAtRest{stateDir: stateDir, pulumiHome: pulumiHomeOf(t), backendURL: pg.url, secrets: secrets}
	if workspaceFiles := atRest.check(t, "while the stack exists"); !slices.Contains(workspaceFiles, filepath.Join("workspaces", stackName, "Pulumi.yaml")) {
		t.Errorf("the search of the state directory did not see the workspace's Pulumi.yaml of stack %s (saw %v)", stackName, workspaceFiles)
	}
	// 7. Delete: gone.
	if err := cr.Delete(ctx, "leak", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitConverged(t, c, ns, nil, []string{"leak"}, 3*time.Minute)
	stopSampling()
	<-sampled

	events := eventTexts(t, c, ns)
	for _, want := range []string{api.ReasonInvalidSpec, api.ReasonBackendUnavailable, watcher.ReasonDestroyed} {
		if !strings.Contains(events, "reason: "+want) {
			t.Errorf("no %s Event: the scenario did not happen as planned", want)
		}
	}
	cmdMu.Lock()
	var cmds []string
	for l := range cmdlines {
		cmds = append(cmds, l)
	}
	var envs []string
	for e := range environs {
		envs = append(envs, e)
	}
	if pluginEnvirons == 0 {
		t.Error("no provider plugin's environment was sampled: the search of the environments proves nothing")
	}
	cmdMu.Unlock()
	haystacks := map[string]string{
		"the environments of the operators' processes (/proc/<pid>/environ), plugins included": strings.Join(envs, "\n"),
		"the operator's log":                            op.logs.String(),
		"the wrong-password operator's log":             opWrong.logs.String(),
		"the object's versions (status)":                objects(),
		"the Events of the namespace":                   events,
		"the command lines of the operators' processes": strings.Join(cmds, "\n"),
	}
	for where, hay := range haystacks {
		if hay == "" {
			t.Errorf("%s: nothing recorded", where)
		}
		for what, secret := range secrets {
			if i := strings.Index(hay, secret); i >= 0 {
				t.Errorf("%s shows %s: ...%s...", where, what, strings.ReplaceAll(context60(hay, i, len(secret)), secret, "<"+what+">"))
			}
		}
	}
	t.Logf("looked for %d secrets in %d log bytes, %d object bytes, %d Event bytes, %d command lines and %d process environments (%d of provider plugins)",
		len(secrets), len(op.logs.String())+len(opWrong.logs.String()), len(objects()), len(events), len(cmds), len(envs), pluginEnvirons)

	atRest.check(t, "after the delete")
}

// forkerEnv, set to a duration, makes the test binary a forker (see TestMain): for that long
// it starts children (/bin/true) one after another, each with only the tag of its own
// environment.
const forkerEnv = "PULUMI_OPERATOR_CRASH_TEST_FORKER"

// forker runs children, one at a time, each with an environment of the tag alone, for d.
func forker(d time.Duration) {
	env := []string{tagEnv + "=" + os.Getenv(tagEnv)}
	for end := time.Now().Add(d); time.Now().Before(end); {
		c := exec.Command("/bin/true")
		c.Env = env
		_ = c.Run()
	}
}

// TestProcessEnvironsSkipsForks checks the sampling TestPassphraseNeverLeaks relies on: a
// process that starts children with a clean environment (a forker, its environment holding a
// secret) is never reported as a child that holds the secret, though a read of
// /proc/<pid>/environ between a child's fork and its exec shows the forker's environment. The
// raw reads are counted too, and logged: they show how often the old sampling would have
// reported a leak that is not one. It samples until it has seen 300 children (at most a
// minute, the forker's time).
func TestProcessEnvironsSkipsForks(t *testing.T) {
	const want = 300
	secret := "forker-secret-" + randomHex(8)
	tag := fmt.Sprintf("forker-%d-%d", os.Getpid(), time.Now().UnixNano())
	o := &operator{t: t, name: "forker", args: []string{os.Args[0]}, tag: tag, logs: &logBuffer{},
		env: []string{forkerEnv + "=1m", "FORKER_SECRET=" + secret, tagEnv + "=" + tag}}
	o.start()
	t.Cleanup(func() { killTagged(tag, 0) })
	sampled, raw := 0, 0
	for sampled < want && o.pid() != 0 {
		for cmdline, env := range o.processEnvirons() {
			sampled++
			if strings.Contains(env, secret) {
				t.Fatalf("process %q shows the forker's secret in its environment: a child that never runs with it", cmdline)
			}
		}
		for _, p := range taggedPIDs(tag, o.pid()) {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p)); err == nil && bytes.Contains(b, []byte(secret)) {
				raw++
			}
		}
	}
	t.Logf("sampled %d children's environments, none with the secret; %d raw reads of a child's environ showed the forker's", sampled, raw)
	if sampled < want {
		t.Fatalf("the forker ended (a minute) before %d of its children were sampled: the check proves too little\n%s", want, o.logs.String())
	}
}

// context60 is the text around s[i:i+n], 60 bytes either side.
func context60(s string, i, n int) string {
	from, to := max(0, i-60), min(len(s), i+n+60)
	return s[from:to]
}

// secretsAtRest searches the places on disk where a secret could come to rest for the secrets
// of TestPassphraseNeverLeaks (what -> value), and fails the test for each one found where it
// has no business being. The places, and what each may hold:
//   - the operator's state directory (--state-dir, a volume): nothing. The password is never in
//     the URL (the operator refuses one that holds it: newOperator moves it to PGPASSWORD), and
//     the workspaces' Pulumi.yaml names no backend (the CLI reads PULUMI_BACKEND_URL).
//   - the operator's Pulumi home (the CLI's workspace settings and logs; not plugins/, which
//     holds binaries): nothing. The CLI's logs there are encrypted ("PLOG" files): a search of
//     the plain bytes cannot see into them.
//   - the state backend, the test's own PostgreSQL table, every row: nothing (the passphrase
//     only encrypts; it is not stored).
//
// The passphrase file the test gives the operator (PULUMI_CONFIG_PASSPHRASE_FILE, a mounted
// Secret in a cluster) holds the passphrase by design; it lies outside the state directory and
// is not searched.
type secretsAtRest struct {
	stateDir, pulumiHome, backendURL string
	secrets                          map[string]string
}

// check searches every place once, when says at which step of the test, and returns the files
// of the state directory's workspaces it read (relative to the state directory).
func (a secretsAtRest) check(t *testing.T, when string) []string {
	t.Helper()
	var workspaceFiles []string
	_ = filepath.WalkDir(a.stateDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(a.stateDir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return nil // removed meanwhile: the operator is running
		}
		parts := strings.Split(rel, string(filepath.Separator))
		if parts[0] == "workspaces" {
			workspaceFiles = append(workspaceFiles, rel)
		}
		if len(parts) == 3 && parts[0] == "workspaces" && parts[2] == "Pulumi.yaml" {
			// The CLI reads the backend from PULUMI_BACKEND_URL: the workspace names none.
			if backendURL, err := backendOf(b); err != nil || backendURL != "" {
				t.Errorf("%s: %s names backend %q (%v), want none", when, rel, stack.RedactURL(backendURL), err)
			}
		}
		for what, secret := range a.secrets {
			if bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s: file %s in the state directory holds %s", when, rel, what)
			}
		}
		return nil
	})

	homeFiles := 0
	_ = filepath.WalkDir(a.pulumiHome, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() {
			if p == filepath.Join(a.pulumiHome, "plugins") {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		homeFiles++
		for what, secret := range a.secrets {
			if bytes.Contains(b, []byte(secret)) {
				rel, _ := filepath.Rel(a.pulumiHome, p)
				t.Errorf("%s: file %s in the Pulumi home %s holds %s", when, rel, a.pulumiHome, what)
			}
		}
		return nil
	})

	// The CLI's postgres backend keeps each object as JSON {"data": "<base64>"}
	// (pkg/backend/diy/postgres), so the search decodes it in the server.
	table := pgTable(t, a.backendURL)
	rows := testenv.PSQL(t, a.backendURL, "SELECT count(*) FROM "+table)
	for what, secret := range a.secrets {
		q := fmt.Sprintf("SELECT key FROM %s WHERE position(decode('%x', 'hex') in decode(data->>'data', 'base64')) > 0", table, secret)
		if keys := testenv.PSQL(t, a.backendURL, q); len(keys) > 0 {
			t.Errorf("%s: the backend's objects %v hold %s", when, keys, what)
		}
	}
	t.Logf("%s: searched %d workspace files in the state directory, %d files in the Pulumi home %s and %s rows of the backend's table for %d secrets",
		when, len(workspaceFiles), homeFiles, a.pulumiHome, strings.Join(rows, ""), len(a.secrets))
	return workspaceFiles
}

// backendOf returns the backend.url of a Pulumi.yaml, "" when it names none.
func backendOf(b []byte) (string, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return "", fmt.Errorf("read as YAML: %w", err)
	}
	backend, _ := doc["backend"].(map[string]any)
	backendURL, _ := backend["url"].(string)
	return backendURL, nil
}

// pulumiHomeOf is the Pulumi home the operator's CLI runs with: the Manager's default for the
// CLI the test gives it, else Pulumi's own default, ~/.pulumi.
func pulumiHomeOf(t *testing.T) string {
	t.Helper()
	if h := stack.DefaultPulumiHome(testenv.PulumiCLI(t)); h != "" {
		return h
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(home, ".pulumi")
}
