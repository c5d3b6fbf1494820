// Command results writes RESULTS.md from the raw outputs of one run of
// dev/benchmarks/measure.sh: from benchstat's CSV, the medians of every
// limiter side by side with each peer's ratio to keyrate, the lead of each of
// keyrate's configurations (columns named keyrate or keyrate-*) over the
// fastest of the peers, scaling across -cpu, the HTTP middleware beside each
// other, and the floor; then the accuracy, memory and latency tables of
// cmd/tables and the core's own benchstat table, as they are.
//
// Each section says which run measured it (-run). A section whose input is
// not given is kept from -previous, the RESULTS.md it replaces, so that a run
// of some parts only (the tables, say) updates those and leaves the others
// as the run before measured them. dev/benchmarks/report.sh runs it.
//
//	go run ./cmd/results [-allow allow.csv] [-http http.csv] [-floor floor.csv] [-tables tables.md]
//	                     [-core core.benchstat.txt] [-previous RESULTS.md] -run "..."
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// table is one unit's table from benchstat's CSV: a value per row and column.
type table struct {
	unit string
	cols []string
	rows []string
	val  map[string]map[string]float64 // row -> col -> center
	vs   map[string]map[string]string  // row -> col -> "vs base" and p
}

// parse reads every table of a benchstat CSV file.
func parse(path string) (map[string]*table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	var recs [][]string
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(rec) > 1 {
			recs = append(recs, rec)
		}
	}
	tables := map[string]*table{}
	for i := 0; i+1 < len(recs); i++ {
		groups, units := recs[i], recs[i+1]
		if groups[0] != "" || units[0] != "" {
			continue
		}
		t := &table{unit: units[1], val: map[string]map[string]float64{}, vs: map[string]map[string]string{}}
		colAt := map[int]string{}
		vsAt := map[int]string{}
		group := ""
		for j := 1; j < len(units); j++ {
			if j < len(groups) && groups[j] != "" {
				group = groups[j]
			}
			switch units[j] {
			case t.unit:
				colAt[j] = group
				t.cols = append(t.cols, group)
			case "vs base":
				vsAt[j] = group
			}
		}
		for i += 2; i < len(recs) && recs[i][0] != ""; i++ {
			row := recs[i]
			if row[0] == "geomean" {
				continue
			}
			t.rows = append(t.rows, row[0])
			t.val[row[0]] = map[string]float64{}
			t.vs[row[0]] = map[string]string{}
			for j, c := range colAt {
				if j < len(row) && row[j] != "" {
					if v, err := strconv.ParseFloat(row[j], 64); err == nil {
						t.val[row[0]][c] = v
					}
				}
			}
			for j, c := range vsAt {
				if j+1 < len(row) {
					t.vs[row[0]][c] = row[j] + " (" + row[j+1] + ")"
				}
			}
		}
		i--
		tables[t.unit] = t
	}
	return tables, nil
}

// splitName turns "Allow/work=W/path=P-2" into W, P and the -cpu value.
func splitName(name string) (work, path, cpu string) {
	cpu = "1"
	if i := strings.LastIndex(name, "-"); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name, cpu = name[:i], name[i+1:]
		}
	}
	for _, part := range strings.Split(name, "/") {
		if k, v, ok := strings.Cut(part, "="); ok {
			switch k {
			case "work":
				work = v
			case "path":
				path = v
			}
		}
	}
	return work, path, cpu
}

func ns(sec float64) string {
	n := sec * 1e9
	if n >= 100 {
		return fmt.Sprintf("%.0f", n)
	}
	return fmt.Sprintf("%.1f", n)
}

func main() {
	allow := flag.String("allow", "", "benchstat -format csv -col /lib output of BenchmarkAllow")
	httpCSV := flag.String("http", "", "benchstat -format csv -col /lib output of BenchmarkHTTP")
	floor := flag.String("floor", "", "benchstat -format csv output of BenchmarkFloor (needs -allow)")
	tablesMD := flag.String("tables", "", "markdown from cmd/tables")
	core := flag.String("core", "", "benchstat text output of the core's own benchmarks")
	previous := flag.String("previous", "", "the RESULTS.md this one replaces: its sections whose input is not given are kept")
	run := flag.String("run", "", "the run that measured the inputs, as each of their sections says")
	count := flag.Int("count", 5, "runs per benchmark (go test -count)")
	flag.Parse()
	if *run == "" {
		fmt.Fprintln(os.Stderr, "results: -run is required")
		os.Exit(2)
	}
	in := inputs{allow: *allow, http: *httpCSV, floor: *floor, tables: *tablesMD, core: *core, previous: *previous, run: *run, count: *count}
	if err := write(os.Stdout, in); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

// inputs names the files write reads (each may be empty, and its section is
// then kept from previous, or left out) and the run that measured them.
type inputs struct {
	allow, http, floor, tables, core string
	previous                         string
	run                              string
	count                            int
}

// tablesHeading and coreHeading head the sections of cmd/tables' output and
// of the core's own benchmarks.
const (
	tablesHeading = "## Accuracy, memory and latency"
	coreHeading   = "## The core: one policy and two"
)

// write writes RESULTS.md: a section for each input given, each saying
// which run measured it, merged with the sections of in.previous.
func write(w io.Writer, in inputs) error {
	var fresh strings.Builder
	var allow *table
	if in.allow != "" {
		at, err := writeThroughput(&fresh, in.allow, in.count)
		if err != nil {
			return err
		}
		allow = at
	}
	if in.http != "" {
		if err := writeHTTP(&fresh, in.http); err != nil {
			return err
		}
	}
	if in.floor != "" {
		if allow == nil {
			return errors.New("-floor needs -allow: the floor is set against keyrate's Allow of the same run")
		}
		if err := writeFloor(&fresh, in.floor, allow); err != nil {
			return err
		}
	}
	if in.tables != "" {
		b, err := os.ReadFile(in.tables)
		if err != nil {
			return err
		}
		fmt.Fprintf(&fresh, "%s\n\nFrom `cmd/tables`.\n\n%s", tablesHeading, b)
	}
	if in.core != "" {
		b, err := os.ReadFile(in.core)
		if err != nil {
			return err
		}
		fmt.Fprintf(&fresh, "%s\n\n", coreHeading)
		fmt.Fprintf(&fresh, "The core package's own benchmarks, run in the repository root with the throughput's flags at\n")
		fmt.Fprintf(&fresh, "`-cpu 1` (`-bench '^Benchmark(Allow|Take|AllowPolicies|TakePolicies)$'`), benchstat\n")
		fmt.Fprintf(&fresh, "medians. `AllowPolicies` and `TakePolicies` hold one hot key to two policies at once;\n")
		fmt.Fprintf(&fresh, "compare them with the `keys=1` rows of `Allow` and with `Take`, one policy on one hot key.\n\n")
		fmt.Fprintf(&fresh, "```\n%s```\n", b)
	}
	secs := splitSections(fresh.String(), "## ")
	for i := range secs.parts {
		if secs.parts[i].heading == tablesHeading {
			// Each of cmd/tables' tables is measured, and kept, on its own.
			sub := splitSections(secs.parts[i].body, "### ")
			for j := range sub.parts {
				if sub.parts[j].heading != "" {
					sub.parts[j].body = stamp(sub.parts[j].body, in.run)
				}
			}
			secs.parts[i].body = sub.String()
			continue
		}
		secs.parts[i].body = stamp(secs.parts[i].body, in.run)
	}
	if in.previous != "" {
		prev, err := readPrevious(in.previous)
		if err != nil {
			return err
		}
		for i := range secs.parts {
			if secs.parts[i].heading != tablesHeading {
				continue
			}
			if old, ok := prev.find(tablesHeading); ok {
				sub := splitSections(secs.parts[i].body, "### ")
				sub.keep(splitSections(old.body, "### "))
				secs.parts[i].body = sub.String()
			}
		}
		secs.keep(prev)
	}
	fmt.Fprintf(w, "# Benchmark results\n\n")
	fmt.Fprintf(w, "Written by `dev/benchmarks/report.sh` from the raw outputs of `dev/benchmarks/measure.sh`. Each\n")
	fmt.Fprintf(w, "section names the run that measured it; a part a run leaves out keeps the figures of the run before.\n")
	fmt.Fprintf(w, "Absolute numbers on a shared machine are noisy, so read the ratios, which come from one side-by-side run.\n\n")
	_, err := io.WriteString(w, secs.parts.String())
	return err
}

// writeThroughput writes the throughput section from benchstat's CSV of
// BenchmarkAllow (-col /lib, keyrate first), and returns its sec/op table
// for the floor.
func writeThroughput(w io.Writer, allowCSV string, count int) (*table, error) {
	at, err := parse(allowCSV)
	if err != nil {
		return nil, err
	}
	sec := at["sec/op"]
	if sec == nil || len(sec.cols) == 0 || sec.cols[0] != "keyrate" {
		return nil, fmt.Errorf("%s: no sec/op table with keyrate as its first column", allowCSV)
	}
	own := ownColumns(sec.cols)
	fmt.Fprintf(w, "## Throughput: ns per Allow\n\n")
	fmt.Fprintf(w, "Medians of %d runs (benchstat).\n", count)
	fmt.Fprintf(w, "Each peer's cell is its median and, in brackets, its time divided by keyrate's (above 1: keyrate is faster).\n")
	fmt.Fprintf(w, "\"lead\" is the fastest peer's time divided by keyrate's; the goal is 1.5 or more (below it: ✗).\n")
	for _, c := range own[1:] {
		fmt.Fprintf(w, "%s is keyrate in another configuration, not a peer: \"%s\" is the fastest peer's time divided by its own.\n", c, leadName(c))
	}
	fmt.Fprintf(w, "\n| workload | path | cpu | %s | fastest peer |", strings.Join(sec.cols, " | "))
	for _, c := range own {
		fmt.Fprintf(w, " %s |", leadName(c))
	}
	fmt.Fprintf(w, "\n|---|---|---:|")
	for range sec.cols {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "---|")
	for range own {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	behind := map[string][]string{}
	for _, row := range sec.rows {
		work, path, cpu := splitName(row)
		base := sec.val[row]["keyrate"]
		fmt.Fprintf(w, "| %s | %s | %s |", work, path, cpu)
		fastest, fastestName := 0.0, ""
		for _, c := range sec.cols {
			v, ok := sec.val[row][c]
			switch {
			case !ok:
				fmt.Fprintf(w, " – |")
			case isOwn(c):
				fmt.Fprintf(w, " **%s** |", ns(v))
			default:
				fmt.Fprintf(w, " %s (%.2f) |", ns(v), v/base)
				if fastestName == "" || v < fastest {
					fastest, fastestName = v, c
				}
			}
		}
		fmt.Fprintf(w, " %s |", fastestName)
		for _, c := range own {
			v, ok := sec.val[row][c]
			if !ok || fastestName == "" {
				fmt.Fprintf(w, " – |")
				continue
			}
			lead := fastest / v
			mark := ""
			if lead < 1.5 {
				mark = " ✗"
				behind[c] = append(behind[c], fmt.Sprintf("%s/%s/cpu=%s (%.2fx vs %s)", work, path, cpu, lead, fastestName))
			}
			fmt.Fprintf(w, " %.2f%s |", lead, mark)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, c := range own {
		if len(behind[c]) > 0 {
			fmt.Fprintf(w, "%s below the 1.5x goal: %s.\n\n", c, strings.Join(behind[c], "; "))
		} else {
			fmt.Fprintf(w, "%s meets the 1.5x goal on every row.\n\n", c)
		}
	}
	writeScaling(w, sec, "parallel-10k")

	for _, unit := range []string{"allocs/op", "B/op", "admit/op"} {
		t := at[unit]
		if t == nil {
			continue
		}
		fmt.Fprintf(w, "### %s\n\n| workload | path | cpu | %s |\n|---|---|---:|", unit, strings.Join(t.cols, " | "))
		for range t.cols {
			fmt.Fprintf(w, "---:|")
		}
		fmt.Fprintln(w)
		for _, row := range t.rows {
			work, path, cpu := splitName(row)
			fmt.Fprintf(w, "| %s | %s | %s |", work, path, cpu)
			for _, c := range t.cols {
				if v, ok := t.val[row][c]; ok {
					fmt.Fprintf(w, " %s |", strconv.FormatFloat(v, 'g', 3, 64))
				} else {
					fmt.Fprintf(w, " – |")
				}
			}
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w)
	}

	return sec, nil
}

// isOwn reports whether a column is one of keyrate's own configurations
// ("keyrate", "keyrate-coarse", ...) rather than a peer.
func isOwn(col string) bool { return col == "keyrate" || strings.HasPrefix(col, "keyrate-") }

// ownColumns returns keyrate's own columns in order; write has checked that
// "keyrate" is the first.
func ownColumns(cols []string) []string {
	var own []string
	for _, c := range cols {
		if isOwn(c) {
			own = append(own, c)
		}
	}
	return own
}

// leadName is the header of the lead column for one of keyrate's own
// configurations: "lead" for keyrate, "lead (coarse)" for keyrate-coarse.
func leadName(col string) string {
	if col == "keyrate" {
		return "lead"
	}
	return "lead (" + strings.TrimPrefix(col, "keyrate-") + ")"
}

// writeScaling compares each limiter's time per call at the lowest and the
// highest -cpu on one workload, per path: above 1, more cores made it faster.
func writeScaling(w io.Writer, sec *table, work string) {
	type key struct{ path, cpu string }
	at := map[key]string{}
	var paths, cpus []string
	for _, row := range sec.rows {
		wk, path, cpu := splitName(row)
		if wk != work {
			continue
		}
		if !slices.Contains(paths, path) {
			paths = append(paths, path)
		}
		if !slices.Contains(cpus, cpu) {
			cpus = append(cpus, cpu)
		}
		at[key{path, cpu}] = row
	}
	if len(cpus) < 2 {
		return
	}
	lo, hi := cpus[0], cpus[len(cpus)-1]
	fmt.Fprintf(w, "### Scaling on distinct keys\n\n%s, ns per Allow at -cpu %s and -cpu %s, and the speed-up (the first over the second;\n", work, lo, hi)
	fmt.Fprintf(w, "%s would be perfect on this machine).\n\n| path | %s |\n|---|", hi, strings.Join(sec.cols, " | "))
	for range sec.cols {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, path := range paths {
		fmt.Fprintf(w, "| %s |", path)
		for _, c := range sec.cols {
			a, okA := sec.val[at[key{path, lo}]][c]
			b, okB := sec.val[at[key{path, hi}]][c]
			if !okA || !okB || b == 0 {
				fmt.Fprintf(w, " – |")
				continue
			}
			fmt.Fprintf(w, " %s → %s (%.2fx) |", ns(a), ns(b), a/b)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}

func writeFloor(w io.Writer, floorCSV string, allow *table) error {
	ft, err := parse(floorCSV)
	if err != nil {
		return err
	}
	t := ft["sec/op"]
	if t == nil || len(t.cols) == 0 {
		return fmt.Errorf("%s: no sec/op table", floorCSV)
	}
	get := func(op string) float64 {
		for _, row := range t.rows {
			if strings.HasSuffix(row, "op="+op) {
				return t.val[row][t.cols[0]]
			}
		}
		return 0
	}
	since, hash, mu, sum := get("time-since"), get("maphash"), get("mutex"), get("sum")
	allowNs := allow.val["Allow/work=serial-hot/path=deny"]["keyrate"]
	fmt.Fprintf(w, "## Floor\n\nWhat one exact decision must at least do, serial, -cpu 1, against keyrate's serial hot-key Allow (deny path).\n\n")
	fmt.Fprintf(w, "| operation | ns |\n|---|---:|\n")
	fmt.Fprintf(w, "| time.Now | %s |\n| time.Since (keyrate's clock read) | %s |\n", ns(get("time-now")), ns(since))
	fmt.Fprintf(w, "| maphash.String, 17-byte key | %s |\n| sync.Mutex Lock+Unlock, uncontended | %s |\n", ns(hash), ns(mu))
	fmt.Fprintf(w, "| sum of the three | %s |\n| the three in one loop | %s |\n", ns(since+hash+mu), ns(sum))
	if allowNs > 0 {
		fmt.Fprintf(w, "| **keyrate Allow** | **%s** |\n| Allow minus the sum | %s (%.2fx the sum) |\n", ns(allowNs), ns(allowNs-(since+hash+mu)), allowNs/(since+hash+mu))
	}
	for _, c := range ownColumns(allow.cols)[1:] {
		// A coarse clock reads no clock per call: its floor is the hash and the lock.
		v := allow.val["Allow/work=serial-hot/path=deny"][c]
		if v > 0 && strings.HasSuffix(c, "-coarse") {
			fmt.Fprintf(w, "| **%s Allow** (no clock read) | **%s** |\n| %s Allow minus maphash and mutex | %s (%.2fx the two) |\n", c, ns(v), c, ns(v-(hash+mu)), v/(hash+mu))
		}
	}
	fmt.Fprintln(w)
	return nil
}
