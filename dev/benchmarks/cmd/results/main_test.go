package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A benchstat CSV in the shape of `benchstat -col /lib -format csv`: keyrate,
// keyrate-coarse, then two peers, three rows.
const allowCSV = `goos: linux
,keyrate,,keyrate-coarse,,,,xrate,,,,golimiter,,,
,sec/op,CI,sec/op,CI,vs base,P,sec/op,CI,vs base,P,sec/op,CI,vs base,P
Allow/work=serial-hot/path=deny,1e-07,∞,5e-08,∞,-50%,p=0.008 n=5,1.2e-07,∞,+20%,p=0.008 n=5,9e-08,∞,-10%,p=0.008 n=5
Allow/work=parallel-10k/path=deny,8e-08,∞,4e-08,∞,-50%,p=0.008 n=5,1.6e-07,∞,+100%,p=0.008 n=5,2.4e-07,∞,+200%,p=0.008 n=5
Allow/work=parallel-10k/path=deny-2,4e-08,∞,2.5e-08,∞,-37%,p=0.008 n=5,8e-08,∞,+100%,p=0.008 n=5,2.4e-07,∞,+500%,p=0.008 n=5
geomean,1e-07,,5e-08,,,,1e-07,,,,1e-07,,,
`

func TestLeadIsOverPeersOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.csv")
	if err := os.WriteFile(path, []byte(allowCSV), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := write(&out, inputs{allow: path, run: "test", count: 5}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"| workload | path | cpu | keyrate | keyrate-coarse | xrate | golimiter | fastest peer | lead | lead (coarse) |",
		// keyrate-coarse is faster than every peer but is not the fastest
		// peer; lead is golimiter over keyrate, lead (coarse) golimiter over
		// keyrate-coarse.
		"| serial-hot | deny | 1 | **100** | **50.0** | 120 (1.20) | 90.0 (0.90) | golimiter | 0.90 ✗ | 1.80 |",
		"| parallel-10k | deny | 1 | **80.0** | **40.0** | 160 (2.00) | 240 (3.00) | xrate | 2.00 | 4.00 |",
		"keyrate below the 1.5x goal: serial-hot/deny/cpu=1 (0.90x vs golimiter).",
		"keyrate-coarse meets the 1.5x goal on every row.",
		"| deny | 80.0 → 40.0 (2.00x) | 40.0 → 25.0 (1.60x) | 160 → 80.0 (2.00x) | 240 → 240 (1.00x) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
}

func TestKeyrateMustBeTheFirstColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "allow.csv")
	csv := strings.ReplaceAll(allowCSV, ",keyrate,,keyrate-coarse,", ",other,,keyrate-coarse,")
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(&strings.Builder{}, inputs{allow: path, run: "test", count: 5}); err == nil {
		t.Fatal("accepted a table whose first column is not keyrate")
	}
}

// A benchstat CSV in the shape of `benchstat -col /lib -format csv` over
// BenchmarkHTTP: httplimit, then two peers.
const httpCSV = `goos: linux
,httplimit,,httprate,,,,tollbooth,,,
,sec/op,CI,sec/op,CI,vs base,P,sec/op,CI,vs base,P
HTTP/path=deny,1e-06,∞,2e-06,∞,+100%,p=0.008 n=5,1.5e-06,∞,+50%,p=0.008 n=5
HTTP/path=admit-2,8e-07,∞,6e-07,∞,-25%,p=0.008 n=5,1.6e-06,∞,+100%,p=0.008 n=5
geomean,1e-06,,1e-06,,,,1e-06,,,

,httplimit,,httprate,,,,tollbooth,,,
,B/op,CI,B/op,CI,vs base,P,B/op,CI,vs base,P
HTTP/path=deny,368,∞,216,∞,~,p=0.3 n=5,644,∞,~,p=0.3 n=5
HTTP/path=admit-2,115,∞,152,∞,~,p=0.3 n=5,586,∞,~,p=0.3 n=5
geomean,1,,1,,,,1,,,

,httplimit,,httprate,,,,tollbooth,,,
,allocs/op,CI,allocs/op,CI,vs base,P,allocs/op,CI,vs base,P
HTTP/path=deny,10,∞,13,∞,~,p=0.3 n=5,25,∞,~,p=0.3 n=5
HTTP/path=admit-2,2,∞,9,∞,~,p=0.3 n=5,23,∞,~,p=0.3 n=5
geomean,1,,1,,,,1,,,
`

func TestHTTPSection(t *testing.T) {
	dir := t.TempDir()
	allow, httpPath := filepath.Join(dir, "allow.csv"), filepath.Join(dir, "http.csv")
	for p, s := range map[string]string{allow: allowCSV, httpPath: httpCSV} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := write(&out, inputs{allow: allow, http: httpPath, run: "test", count: 5}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"## HTTP middleware: ns per request",
		"| path | cpu | httplimit | httprate | tollbooth | fastest peer | lead |",
		// The fastest peer is tollbooth on one row and httprate on the other.
		"| deny | 1 | **1000** | 2000 (2.00) | 1500 (1.50) | tollbooth | 1.50 |",
		"| admit | 2 | **800** | 600 (0.75) | 1600 (2.00) | httprate | 0.75 ✗ |",
		"httplimit not faster than every peer: admit/cpu=2 (0.75x vs httprate).",
		"| deny | 1 | 10 (368) ✗ | 13 (216) | 25 (644) |",
		"| admit | 2 | 2 (115) | 9 (152) | 23 (586) |",
		"httplimit above 2 allocations per request: deny/cpu=1 (10).",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
	// The section follows the throughput tables.
	if i, j := strings.Index(got, "### Scaling"), strings.Index(got, "## HTTP"); i < 0 || j < i {
		t.Errorf("HTTP section at %d, throughput's scaling table at %d", j, i)
	}
}

func TestHTTPSectionNeedsHTTPLimitFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "http.csv")
	csv := strings.ReplaceAll(httpCSV, ",httplimit,,httprate,", ",httprate,,httplimit,")
	if err := os.WriteFile(path, []byte(csv), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeHTTP(&strings.Builder{}, path); err == nil {
		t.Fatal("accepted a table whose first column is not httplimit")
	}
}

// A RESULTS.md from before each section said which run measured it: one
// "Produced by" line at the top.
const previousMD = "# Benchmark results\n\nProduced by `run.sh (old)`. Medians of 5 runs (benchstat).\n\n" +
	"## Throughput: ns per Allow\n\nold throughput\n\n### Scaling on distinct keys\n\nold scaling\n\n" +
	"## Floor\n\nold floor\n\n" +
	"## Accuracy, memory and latency\n\nFrom `go run ./cmd/tables`.\n\n" +
	"### Accuracy\n\nold accuracy\n\n### Memory\n\nold memory\n\n### Latency while idle keys are swept\n\nold latency\n\n" +
	"## The core: one policy and two\n\nold core\n"

// A run of cmd/tables' accuracy and memory only replaces those tables, in
// place, and adds its new one after them; every other section and table is
// kept, saying which run measured it.
func TestTablesOnlyKeepTheRest(t *testing.T) {
	dir := t.TempDir()
	prev, tables := filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "tables.md")
	fresh := "### Accuracy\n\nnew accuracy\n\n### Memory\n\nnew memory\n\n### Memory per key at the full limit\n\nnew full\n\n"
	for p, s := range map[string]string{prev: previousMD, tables: fresh} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := write(&out, inputs{tables: tables, previous: prev, run: "measure.sh (new)"}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	want := "## Throughput: ns per Allow\n\nMeasured by `run.sh (old)`.\n\nold throughput\n\n### Scaling on distinct keys\n\nold scaling\n\n" +
		"## Floor\n\nMeasured by `run.sh (old)`.\n\nold floor\n\n" +
		"## Accuracy, memory and latency\n\nFrom `cmd/tables`.\n\n" +
		"### Accuracy\n\nMeasured by `measure.sh (new)`.\n\nnew accuracy\n\n" +
		"### Memory\n\nMeasured by `measure.sh (new)`.\n\nnew memory\n\n" +
		"### Memory per key at the full limit\n\nMeasured by `measure.sh (new)`.\n\nnew full\n\n" +
		"### Latency while idle keys are swept\n\nMeasured by `run.sh (old)`.\n\nold latency\n\n" +
		"## The core: one policy and two\n\nMeasured by `run.sh (old)`.\n\nold core\n"
	if !strings.HasSuffix(got, want) {
		t.Errorf("got:\n%s\nwant it to end in:\n%s", got, want)
	}
	if strings.Contains(got, "Produced by") {
		t.Errorf("the old header is kept:\n%s", got)
	}

	// Written again over its own output with nothing new, it is unchanged:
	// every section already says which run measured it.
	if err := os.WriteFile(prev, []byte(got), 0o600); err != nil {
		t.Fatal(err)
	}
	var again strings.Builder
	if err := write(&again, inputs{previous: prev, run: "measure.sh (newer)"}); err != nil {
		t.Fatal(err)
	}
	if again.String() != got {
		t.Errorf("rewritten with no inputs:\n%s\nwant it as it was:\n%s", again.String(), got)
	}
}

// A throughput run replaces the throughput section and keeps the tables.
func TestThroughputReplacesItsSection(t *testing.T) {
	dir := t.TempDir()
	prev, allow := filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "allow.csv")
	for p, s := range map[string]string{prev: previousMD, allow: allowCSV} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	if err := write(&out, inputs{allow: allow, previous: prev, run: "measure.sh (new)", count: 5}); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"## Throughput: ns per Allow\n\nMeasured by `measure.sh (new)`.\n\nMedians of 5 runs (benchstat).\n",
		"### Scaling on distinct keys\n\nparallel-10k, ns per Allow",
		"## Floor\n\nMeasured by `run.sh (old)`.\n\nold floor\n",
		"### Latency while idle keys are swept\n\nMeasured by `run.sh (old)`.\n\nold latency\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old throughput") || strings.Contains(got, "old scaling") {
		t.Errorf("the old throughput section is kept:\n%s", got)
	}
	if i, j := strings.Index(got, "## Throughput"), strings.Index(got, "## Floor"); i < 0 || j < i {
		t.Errorf("throughput at %d, floor at %d: out of order", i, j)
	}
}

func TestFloorNeedsAllow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.csv")
	if err := os.WriteFile(path, []byte("goos: linux\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(&strings.Builder{}, inputs{floor: path, run: "test"}); err == nil {
		t.Fatal("wrote a floor with no Allow of the same run to set it against")
	}
}
