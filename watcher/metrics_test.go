package watcher

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	api "github.com/pulumi-operator/pulumi-operator/api/v1"
)

// pulumi_operator_condition has one series per condition, at its current status: a status
// change moves the series, a condition that goes takes its series, forget takes them all.
func TestConditionMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	key := cache.ObjectName{Namespace: "ns", Name: "web"}
	// series lists the object's condition series as "Type=Status" (value 1), sorted.
	series := func() string {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, f := range fams {
			if f.GetName() != "pulumi_operator_condition" {
				continue
			}
			for _, mt := range f.GetMetric() {
				l := map[string]string{}
				for _, lp := range mt.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				out = append(out, fmt.Sprintf("%s=%s:%g", l["type"], l["status"], mt.GetGauge().GetValue()))
			}
		}
		slices.Sort(out)
		return strings.Join(out, " ")
	}
	cond := func(typ string, st metav1.ConditionStatus) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st}
	}
	for name, tc := range map[string]struct {
		before, after []metav1.Condition
		want          string
	}{
		"ready": {nil, []metav1.Condition{cond(api.ConditionReady, "True"), cond(api.ConditionReconciling, "False")},
			"Ready=True:1 Reconciling=False:1"},
		"ready to failed": {[]metav1.Condition{cond(api.ConditionReady, "True")}, []metav1.Condition{cond(api.ConditionReady, "False"), cond(api.ConditionStalled, "True")},
			"Ready=False:1 Stalled=True:1"},
		"condition gone": {[]metav1.Condition{cond(api.ConditionReady, "True"), cond(api.ConditionStalled, "True")}, []metav1.Condition{cond(api.ConditionReady, "True")},
			"Ready=True:1"},
		"unchanged": {[]metav1.Condition{cond(api.ConditionReady, "Unknown")}, []metav1.Condition{cond(api.ConditionReady, "Unknown")},
			"Ready=Unknown:1"},
	} {
		t.Run(name, func(t *testing.T) {
			m.forget(key)
			if tc.before != nil {
				m.setConditions(key, tc.before)
			}
			m.setConditions(key, tc.after)
			if got := series(); got != tc.want {
				t.Errorf("series %q, want %q", got, tc.want)
			}
		})
	}
	m.setConditions(key, []metav1.Condition{cond(api.ConditionReady, "True")})
	m.forget(key)
	if got := series(); got != "" {
		t.Errorf("series after forget: %s, want none", got)
	}
}
