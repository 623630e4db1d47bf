package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestScaleGolden pins the scale section rendered from a small run's results (testdata/render/
// scale.json: bursts of 10 and 20, idle at 20 and 40, 3 shards over 30 objects, the 10,000
// point left out by the budget): the targets, the bursts' per-object ratio, the memory per
// object from the previous point, and the sizing derived from them.
func TestScaleGolden(t *testing.T) {
	r, err := readResults(filepath.Join("testdata", "render", "scale.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.scaleSection()
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, filepath.Join("testdata", "render", "scale.md"), got)
	for _, s := range []string{"| NOT MEASURED: left out, see below |", "- idle at 10000 objects not measured", "| shards: no lock contention between shards | 0 reconciles met a lock | MET |"} {
		if !strings.Contains(got, s) {
			t.Errorf("the section lacks %q", s)
		}
	}
}

// TestSectionsKept: `make bench` rewrites the doc and keeps the scale, soak, partition and
// tenants sections; `make bench-scale` replaces its own section and leaves the rest of the doc
// as it was.
func TestSectionsKept(t *testing.T) {
	kept := "\n" + scaleBegin + "\nscale v1\n" + scaleEnd + "\n\n" + waveBegin + "\nwave\n" + waveEnd + "\n\n" + soakBegin + "\nsoak\n" + soakEnd + "\n\n" +
		partitionBegin + "\npartition\n" + partitionEnd + "\n\n" + tenantsBegin + "\ntenants\n" + tenantsEnd + "\n"
	old := "# Benchmarks\nold figures\n" + kept
	got := keepSections(old, "# Benchmarks\nnew figures\n")
	want := "# Benchmarks\nnew figures\n" + kept
	if got != want {
		t.Errorf("keepSections:\ngot  %q\nwant %q", got, want)
	}
	// A marker whose description was edited by hand keeps its section all the same.
	edited := strings.Replace(old, tenantsBegin, "<!-- tenants: described otherwise -->", 1)
	if got := keepSections(edited, "# Benchmarks\nnew figures\n"); !strings.Contains(got, "described otherwise -->\ntenants\n"+tenantsEnd) {
		t.Errorf("keepSections lost the tenants section of an edited marker:\n%q", got)
	}
	got = spliceSection(old, scaleBegin, scaleEnd, "scale v2\n")
	want = strings.Replace(old, "scale v1", "scale v2", 1)
	if got != want {
		t.Errorf("spliceSection replacing:\ngot  %q\nwant %q", got, want)
	}
	got = spliceSection("# Benchmarks\n", scaleBegin, scaleEnd, "scale\n")
	if want := "# Benchmarks\n\n" + scaleBegin + "\nscale\n" + scaleEnd + "\n"; got != want {
		t.Errorf("spliceSection appending:\ngot  %q\nwant %q", got, want)
	}
}

// TestPositiveInts: the lists of --scale-bursts and --scale-idle, and the errors a user gets.
func TestPositiveInts(t *testing.T) {
	for in, want := range map[string]string{
		"":               "[] <nil>",
		"100,300,1000":   "[100 300 1000] <nil>",
		" 1000 , 3000 ,": "[1000 3000] <nil>",
		"300,100":        `[] "300,100": want positive integers in ascending order`,
		"100,100":        `[] "100,100": want positive integers in ascending order`,
		"0":              `[] "0": want positive integers in ascending order`,
		"ten":            `[] "ten": want positive integers in ascending order`,
	} {
		got, err := positiveInts(in)
		if s := fmt.Sprint(got, " ", err); s != want {
			t.Errorf("positiveInts(%q) = %s, want %s", in, s, want)
		}
	}
}

// TestBurstStatus: the burst target's status says MET, or NOT MET with the CPU figures of the
// smallest and the largest burst, and the raw ups' only when two or more were measured.
func TestBurstStatus(t *testing.T) {
	bursts := []scaleBurstRow{
		{BurstResult: BurstResult{CRs: 100}, CPUPerUp: 0.22, ClusterPerObject: 0.19},
		{BurstResult: BurstResult{CRs: 300}, CPUPerUp: 0.25, ClusterPerObject: 0.19},
		{BurstResult: BurstResult{CRs: 1000}, CPUPerUp: 0.36, ClusterPerObject: 0.27},
	}
	floors := []ScaleFloor{{Objects: 0, CPUSeconds: 0.51}, {Objects: 400, CPUSeconds: 0.5}}
	cpu := "NOT MET: from 100 to 1000 new objects, the operator tree's CPU per up went from 0.22 to 0.36 s and the cluster's CPU per object from 0.19 to 0.27 s"
	for _, tc := range []struct {
		name   string
		met    bool
		bursts []scaleBurstRow
		floors []ScaleFloor
		want   string
	}{
		{"met", true, bursts, floors, "MET"},
		{"one burst", false, bursts[:1], floors, "NOT MET"},
		{"not met, no raw up", false, bursts, nil, cpu},
		{"not met, one raw up", false, bursts, floors[:1], cpu},
		{"not met, raw ups", false, bursts, floors, cpu + "; a raw up with a backend of its own cost 0.51 CPU s with 0 objects in the cluster and 0.50 with 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &scaleData{ScaleResult: &ScaleResult{Floors: tc.floors}, Bursts: tc.bursts}
			if got := d.burstStatus(tc.met); got != tc.want {
				t.Errorf("burstStatus(%v) = %q, want %q", tc.met, got, tc.want)
			}
		})
	}
}

// TestScaleBackend covers --scale-backend: the flag's checks, the URL the operators get and
// what the section says of the backend.
func TestScaleBackend(t *testing.T) {
	for _, tc := range []struct {
		name, backend, url string
		scale              bool
		wantErr            string
	}{
		{name: "postgres with a URL", backend: "postgres", url: "postgres://u@127.0.0.1:5432/db", scale: true},
		{name: "file needs no URL", backend: "file", scale: true},
		{name: "postgres without a URL, no phase scale", backend: "postgres"},
		{name: "postgres without a URL", backend: "postgres", scale: true, wantErr: "needs --postgres-url"},
		{name: "unknown backend", backend: "s3", url: "postgres://x", scale: true, wantErr: `"s3": want postgres or file`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkScaleBackend(tc.backend, tc.url, tc.scale)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("checkScaleBackend = %v, want %q", err, tc.wantErr)
			}
		})
	}
	u, err := withTable("postgres://u:p@127.0.0.1:5432/db?sslmode=disable&table=other", scaleTable)
	if err != nil || !strings.Contains(u, "table="+scaleTable) || strings.Contains(u, "table=other") || !strings.Contains(u, "sslmode=disable") {
		t.Errorf("withTable = %q, %v", u, err)
	}
	if _, err := withTable("postgres://u@[::1", scaleTable); err == nil || !strings.Contains(err.Error(), "--postgres-url") {
		t.Errorf("withTable of a bad URL: err = %v", err)
	}
	r, err := readResults(filepath.Join("testdata", "render", "scale.json"))
	if err != nil {
		t.Fatal(err)
	}
	for backend, want := range map[string]string{"postgres": "The operators' backend is PostgreSQL", "file": "The operator's backend is the file backend", "": "The operator's backend is the file backend"} {
		r.Scale.Backend = backend
		got, err := r.scaleSection()
		if err != nil || !strings.Contains(got, want) {
			t.Errorf("backend %q: section lacks %q (err %v)", backend, want, err)
		}
	}
}
