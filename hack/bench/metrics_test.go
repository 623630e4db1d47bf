package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// testdata/metrics.txt is what client_golang's handler serves for a registry with the
// operator's metrics (pulumi_operator_*, workqueue_*) beside the Go and process collectors.

func TestSumMetric(t *testing.T) {
	tests := map[string]struct {
		name  string
		match map[string]string
		want  float64
	}{
		"counter, every result":   {name: "pulumi_operator_reconciles_total", want: 9},
		"counter, one result":     {name: "pulumi_operator_reconciles_total", match: map[string]string{"result": "error"}, want: 2},
		"counter, result not yet": {name: "pulumi_operator_reconciles_total", match: map[string]string{"result": "locked"}, want: 0},
		"label the metric lacks":  {name: "pulumi_operator_reconciles_total", match: map[string]string{"name": "x"}, want: 0},
		"gauge by queue name":     {name: "workqueue_depth", match: map[string]string{"name": "kindcustomhttp"}, want: 3},
		"gauge, every queue":      {name: "workqueue_depth", want: 3},
		"family never exposed":    {name: "pulumi_operator_stacks_managed", want: 0},
		"a prefix is not a match": {name: "pulumi_operator_reconciles", want: 0},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open("testdata/metrics.txt")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := sumMetric(f, tc.name, tc.match)
			if err != nil {
				t.Fatalf("sumMetric: %v", err)
			}
			if got != tc.want {
				t.Errorf("sumMetric(%s, %v) = %v, want %v", tc.name, tc.match, got, tc.want)
			}
		})
	}
}

func TestSumMetricErrors(t *testing.T) {
	tests := map[string]struct {
		text, name, want string
	}{
		"histogram": {
			text: mustRead(t, "testdata/metrics.txt"), name: "pulumi_operator_reconcile_duration_seconds",
			want: "a HISTOGRAM, want a counter, gauge or untyped metric",
		},
		"summary": {
			text: mustRead(t, "testdata/metrics.txt"), name: "go_gc_duration_seconds",
			want: "a SUMMARY, want a counter, gauge or untyped metric",
		},
		"not the text format": {text: "workqueue_depth{name=\"q\" 3\n", name: "workqueue_depth", want: "parse metrics"},
		"value not a number":  {text: "workqueue_depth 3x\n", name: "workqueue_depth", want: "parse metrics"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := sumMetric(strings.NewReader(tc.text), tc.name, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("sumMetric error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestOperatorMetric(t *testing.T) {
	text := mustRead(t, "testdata/metrics.txt")
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		accept = r.Header.Get("Accept")
		_, _ = w.Write([]byte(text))
	}))
	defer srv.Close()
	o := &operator{metrics: srv.URL + "/metrics"}
	got, err := o.metric("pulumi_operator_reconciles_total", map[string]string{"result": "success"})
	if err != nil || got != 7 {
		t.Fatalf("metric = %v, %v; want 7, nil", got, err)
	}
	if !strings.HasPrefix(accept, "text/plain; version=0.0.4") {
		t.Errorf("Accept = %q, want the text format 0.0.4", accept)
	}
}

func TestOperatorMetricErrors(t *testing.T) {
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "registry broken", http.StatusInternalServerError)
	}))
	defer failing.Close()
	garbled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("<html>not metrics</html>\n"))
	}))
	defer garbled.Close()
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	tests := map[string]struct{ url, want string }{
		"answers 500":    {url: failing.URL, want: "500 Internal Server Error"},
		"not listening":  {url: gone.URL, want: "scrape operator metrics"},
		"not a URL":      {url: "http://[::1", want: "scrape operator metrics"},
		"not the format": {url: garbled.URL, want: "parse metrics"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := &operator{metrics: tc.url}
			if _, err := o.metric("workqueue_depth", nil); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("metric error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
