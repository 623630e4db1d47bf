package config_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/pulumi-operator/pulumi-operator/internal/testenv"
)

// promtoolCLI returns the pinned promtool built by `make promtool` (bin/promtool).
func promtoolCLI(t *testing.T) string {
	t.Helper()
	p := root("bin", "promtool")
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "no promtool at "+p+": run `make promtool` (hack/build-promtool.sh)")
	}
	return p
}

// ruleTest is one test of `promtool test rules` (Prometheus' rule unit tests): series given
// minute by minute, and the alerts expected at one time.
type ruleTest struct {
	Interval   string        `json:"interval"`
	Series     []inputSeries `json:"input_series"`
	AlertTests []alertTest   `json:"alert_rule_test"`
}

type inputSeries struct {
	Series string `json:"series"`
	Values string `json:"values"`
}

type alertTest struct {
	EvalTime  string          `json:"eval_time"`
	AlertName string          `json:"alertname"`
	ExpAlerts []expectedAlert `json:"exp_alerts"`
}

type expectedAlert struct {
	Labels      map[string]string `json:"exp_labels"`
	Annotations map[string]string `json:"exp_annotations"`
}

// TestPrometheusRuleUnitTests renders the chart's PrometheusRule, checks it with `promtool check
// rules`, and runs `promtool test rules` on it: each alert fires on synthetic series of the
// trouble it is for, after its `for`, with its labels and its annotations filled in, and stays
// silent on the series of a healthy operator. An alert the chart adds without a case here fails
// the test.
func TestPrometheusRuleUnitTests(t *testing.T) {
	promtool := promtoolCLI(t)
	helmCLI(t)
	objs, err := helmTemplate(t, "--set", "passphrase=x", "--set", "metrics.prometheusRule.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	rule := mustFind(t, objs, "PrometheusRule", operatorName)
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", filepath.Join(dir, "rules.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}

	// The alerts as rendered: their labels, annotations and `for`.
	type alert struct {
		labels, annotations map[string]string
	}
	alerts := map[string]alert{}
	for _, g := range groups {
		rs, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rs {
			m := r.(map[string]any)
			name, _ := m["alert"].(string)
			labels, _, _ := unstructured.NestedStringMap(m, "labels")
			annotations, _, _ := unstructured.NestedStringMap(m, "annotations")
			alerts[name] = alert{labels, annotations}
		}
	}
	// expect is the alert name firing with the given labels (the series' own, and the rule's), and
	// its annotations filled in as Prometheus does for these templates ($labels.namespace and
	// $labels.name are the only ones used).
	expect := func(name string, seriesLabels map[string]string) []expectedAlert {
		a := alerts[name]
		labels := map[string]string{"alertname": name}
		for k, v := range seriesLabels {
			labels[k] = v
		}
		for k, v := range a.labels {
			labels[k] = v
		}
		delete(labels, "alertname") // promtool adds it
		ann := map[string]string{}
		for k, v := range a.annotations {
			v = strings.ReplaceAll(v, "{{ $labels.namespace }}", seriesLabels["namespace"])
			ann[k] = strings.ReplaceAll(v, "{{ $labels.name }}", seriesLabels["name"])
		}
		return []expectedAlert{{Labels: labels, Annotations: ann}}
	}
	cond := func(typ, status string) string {
		return `pulumi_operator_condition{namespace="shop",name="web",type="` + typ + `",status="` + status + `"}`
	}
	const notReadyFor, queueDepth = 15, 20 // values.yaml's metrics.prometheusRule
	cases := map[string]struct {
		fire, quiet []inputSeries
		at          string
		labels      map[string]string
	}{
		"KindCustomHttpStalled": {
			fire:   []inputSeries{{cond("Stalled", "True"), "1x20"}},
			quiet:  []inputSeries{{cond("Stalled", "False"), "1x20"}},
			at:     "10m", // for: 5m
			labels: map[string]string{"namespace": "shop", "name": "web", "type": "Stalled", "status": "True"},
		},
		"KindCustomHttpNotReady": {
			fire:   []inputSeries{{cond("Ready", "False"), "1x40"}},
			quiet:  []inputSeries{{cond("Ready", "True"), "1x40"}},
			at:     strconv.Itoa(notReadyFor+5) + "m",
			labels: map[string]string{"namespace": "shop", "name": "web", "type": "Ready", "status": "False"},
		},
		"PulumiOperatorReconcileErrors": {
			fire:  []inputSeries{{`pulumi_operator_reconciles_total{result="error"}`, "0+1x60"}},
			quiet: []inputSeries{{`pulumi_operator_reconciles_total{result="error"}`, "3x60"}, {`pulumi_operator_reconciles_total{result="success"}`, "0+5x60"}},
			at:    "40m", // a 10m rate, for: 15m
		},
		"PulumiOperatorLockWaits": {
			fire:  []inputSeries{{`pulumi_operator_reconciles_total{result="locked"}`, "0+1x60"}},
			quiet: []inputSeries{{`pulumi_operator_reconciles_total{result="locked"}`, "0+0.1x60"}},
			at:    "40m", // more than 10 in 30m
		},
		"PulumiOperatorStackLocked": {
			fire:  []inputSeries{{`pulumi_operator_stacks_locked`, "1x60"}},
			quiet: []inputSeries{{`pulumi_operator_stacks_locked`, "0x60"}},
			at:    "40m", // for: 30m
		},
		"PulumiOperatorStateVolumeFilling": {
			fire:   []inputSeries{{`pulumi_operator_state_volume_used_bytes{pod="op"}`, "900x30"}, {`pulumi_operator_state_volume_size_bytes{pod="op"}`, "1000x30"}},
			quiet:  []inputSeries{{`pulumi_operator_state_volume_used_bytes{pod="op"}`, "500x30"}, {`pulumi_operator_state_volume_size_bytes{pod="op"}`, "1000x30"}},
			at:     "20m", // for: 10m
			labels: map[string]string{"pod": "op"},
		},
		"PulumiOperatorQueueBacklog": {
			fire:  []inputSeries{{`workqueue_depth{name="kindcustomhttp"}`, strconv.Itoa(queueDepth+1) + "x40"}},
			quiet: []inputSeries{{`workqueue_depth{name="kindcustomhttp"}`, strconv.Itoa(queueDepth) + "x40"}},
			at:    "25m", // for: 15m
		},
	}
	var names []string
	for name := range alerts {
		names = append(names, name)
	}
	slices.Sort(names)
	var tests []ruleTest
	for _, name := range names {
		c, ok := cases[name]
		if !ok {
			t.Errorf("alert %s has no case here: give it series that fire it and series that do not", name)
			continue
		}
		labels := c.labels
		if labels == nil {
			labels = map[string]string{}
		}
		tests = append(tests,
			ruleTest{Interval: "1m", Series: c.fire, AlertTests: []alertTest{{EvalTime: c.at, AlertName: name, ExpAlerts: expect(name, labels)}}},
			ruleTest{Interval: "1m", Series: c.quiet, AlertTests: []alertTest{{EvalTime: c.at, AlertName: name, ExpAlerts: []expectedAlert{}}}})
	}
	for name := range cases {
		if _, ok := alerts[name]; !ok {
			t.Errorf("case %s: the chart has no such alert", name)
		}
	}
	spec, err := yaml.Marshal(map[string]any{"rule_files": []string{"rules.yaml"}, "evaluation_interval": "1m", "tests": tests})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\ntests:\n%s", err, out, spec)
	}
}
