package main

import (
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metric scrapes the operator's /metrics and returns sumMetric of it: the sum of the samples
// of the counter or gauge name whose labels include every pair of match (nil for all); a
// metric never observed is 0. Errors: the scrape failed, answered other than 200, or did not
// parse.
func (o *operator) metric(name string, match map[string]string) (float64, error) {
	req, err := http.NewRequest(http.MethodGet, o.metrics, nil)
	if err != nil {
		return 0, fmt.Errorf("scrape operator metrics: %w", err)
	}
	// The text format, which sumMetric parses: client_golang's handler would otherwise choose
	// by the Accept header.
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape operator metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape operator metrics: %s answered %s", o.metrics, resp.Status)
	}
	return sumMetric(resp.Body, name, match)
}

// sumMetric reads a Prometheus text exposition (format 0.0.4) from r with expfmt's parser and
// returns the sum of the values of the samples of the counter, gauge or untyped family name
// whose labels include every name/value pair of match. A family absent from r counts 0: a
// client_golang vector with no child yet is not exposed at all. Errors: r does not parse, or
// name is a histogram or summary (their samples are not one value each).
func sumMetric(r io.Reader, name string, match map[string]string) (float64, error) {
	// The zero TextParser is invalid since common v0.66 (no name validation scheme);
	// UTF8Validation accepts every name client_golang can write.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parse metrics: %w", err)
	}
	family, ok := families[name]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range family.GetMetric() {
		if !hasLabels(m.GetLabel(), match) {
			continue
		}
		switch family.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_UNTYPED:
			sum += m.GetUntyped().GetValue()
		default:
			return 0, fmt.Errorf("sum metric %s: a %s, want a counter, gauge or untyped metric", name, family.GetType())
		}
	}
	return sum, nil
}

// hasLabels reports whether labels include every name/value pair of match.
func hasLabels(labels []*dto.LabelPair, match map[string]string) bool {
	found := 0
	for _, l := range labels {
		if v, ok := match[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(match)
}
