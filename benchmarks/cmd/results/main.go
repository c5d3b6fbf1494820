// Command results turns benchstat's CSV output into the markdown tables of
// RESULTS.md: the medians of every limiter side by side with each peer's
// ratio to keyrate, the floor, and the key map comparison. benchmarks/run.sh
// runs it; the accuracy, memory and latency tables come from cmd/tables and
// are appended as they are.
//
//	go run ./cmd/results -allow allow.csv -floor floor.csv -shardcmp shardcmp.csv -tables tables.md -cmd "..."
package main

import (
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"os"
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
			case "path", "map":
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
	floor := flag.String("floor", "", "benchstat -format csv output of BenchmarkFloor")
	shard := flag.String("shardcmp", "", "benchstat -format csv -col /map output of BenchmarkShardCmp")
	shardText := flag.String("shardcmp-text", "", "benchstat text output of BenchmarkShardCmp, quoted as is")
	tablesMD := flag.String("tables", "", "markdown from cmd/tables, appended as is")
	command := flag.String("cmd", "benchmarks/run.sh", "the command that produced the numbers")
	count := flag.Int("count", 5, "runs per benchmark (go test -count)")
	flag.Parse()
	if *allow == "" {
		fmt.Fprintln(os.Stderr, "results: -allow is required")
		os.Exit(2)
	}
	if err := write(os.Stdout, *allow, *floor, *shard, *shardText, *tablesMD, *command, *count); err != nil {
		fmt.Fprintln(os.Stderr, "results:", err)
		os.Exit(1)
	}
}

func write(w io.Writer, allowCSV, floorCSV, shardCSV, shardText, tablesMD, command string, count int) error {
	at, err := parse(allowCSV)
	if err != nil {
		return err
	}
	sec := at["sec/op"]
	if sec == nil || len(sec.cols) == 0 || sec.cols[0] != "keyrate" {
		return fmt.Errorf("%s: no sec/op table with keyrate as its first column", allowCSV)
	}
	fmt.Fprintf(w, "# Benchmark results\n\nProduced by `%s`. Medians of %d runs (benchstat); absolute numbers on a shared\n", command, count)
	fmt.Fprintf(w, "2-core machine are noisy, so read the ratios, which come from one side-by-side run.\n\n")

	fmt.Fprintf(w, "## Throughput: ns per Allow\n\n")
	fmt.Fprintf(w, "Each peer's cell is its median and, in brackets, its time divided by keyrate's (above 1: keyrate is faster).\n")
	fmt.Fprintf(w, "\"lead\" is the fastest peer's time divided by keyrate's; the goal is 1.5 or more (below it: ✗).\n\n")
	fmt.Fprintf(w, "| workload | path | cpu | %s | fastest peer | lead |\n|---|---|---:|", strings.Join(sec.cols, " | "))
	for range sec.cols {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintf(w, "---|---:|\n")
	var behind []string
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
			case c == "keyrate":
				fmt.Fprintf(w, " **%s** |", ns(v))
			default:
				fmt.Fprintf(w, " %s (%.2f) |", ns(v), v/base)
				if fastestName == "" || v < fastest {
					fastest, fastestName = v, c
				}
			}
		}
		lead := fastest / base
		mark := ""
		if lead < 1.5 {
			mark = " ✗"
			behind = append(behind, fmt.Sprintf("%s/%s/cpu=%s (%.2fx vs %s)", work, path, cpu, lead, fastestName))
		}
		fmt.Fprintf(w, " %s | %.2f%s |\n", fastestName, lead, mark)
	}
	fmt.Fprintln(w)
	if len(behind) > 0 {
		fmt.Fprintf(w, "Below the 1.5x goal: %s.\n\n", strings.Join(behind, "; "))
	}

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

	if floorCSV != "" {
		if err := writeFloor(w, floorCSV, sec); err != nil {
			return err
		}
	}
	if shardCSV != "" {
		if err := writeShard(w, shardCSV, shardText); err != nil {
			return err
		}
	}
	if tablesMD != "" {
		b, err := os.ReadFile(tablesMD)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "## Accuracy, memory and latency\n\nFrom `go run ./cmd/tables`.\n\n%s", b)
	}
	return nil
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
	fmt.Fprintln(w)
	return nil
}

func writeShard(w io.Writer, shardCSV, shardText string) error {
	st, err := parse(shardCSV)
	if err != nil {
		return err
	}
	t := st["sec/op"]
	if t == nil || len(t.cols) < 2 {
		return fmt.Errorf("%s: no sec/op table with two maps", shardCSV)
	}
	fmt.Fprintf(w, "## Key map: xsync.MapOf + per-key lock vs hand-sharded map\n\n")
	fmt.Fprintf(w, "`shardcmp_test.go` in the root package: the same eventLog.decide behind keyMap (%s) and behind\n", t.cols[0])
	fmt.Fprintf(w, "256 padded shards of mutex + map, deciding under the shard lock (%s). Below 1: the sharded map is faster.\n\n", t.cols[1])
	fmt.Fprintf(w, "| workload | cpu | %s ns | %s ns | %s / %s | benchstat |\n|---|---:|---:|---:|---:|---|\n", t.cols[0], t.cols[1], t.cols[1], t.cols[0])
	for _, row := range t.rows {
		work, _, cpu := splitName(row)
		a, b := t.val[row][t.cols[0]], t.val[row][t.cols[1]]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f | %s |\n", work, cpu, ns(a), ns(b), b/a, t.vs[row][t.cols[1]])
	}
	fmt.Fprintln(w)
	if shardText != "" {
		b, err := os.ReadFile(shardText)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "<details><summary>benchstat output</summary>\n\n```\n%s```\n\n</details>\n\n", b)
	}
	return nil
}
