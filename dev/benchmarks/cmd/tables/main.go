// Command tables measures accuracy, memory per key and latency during a
// sweep for keyrate and each peer, and prints the results as markdown tables.
// dev/benchmarks/measure.sh runs it (built by build.sh, so that it runs
// anywhere without the source) and report.sh puts its output in RESULTS.md.
//
//	go run ./cmd/tables [-keys 100000] [-sections accuracy,memory,latency]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/dev/benchmarks"
)

func main() {
	keys := flag.Int("keys", 100_000, "keys inserted by the memory measurements")
	sections := flag.String("sections", "accuracy,memory,latency", "comma-separated sections to measure")
	flag.Parse()
	if *keys < 1 {
		fmt.Fprintln(os.Stderr, "tables: -keys must be at least 1")
		os.Exit(2)
	}
	run := map[string]func(io.Writer, int) error{
		"accuracy": accuracy,
		"memory":   memory,
		"latency":  latency,
	}
	for _, s := range strings.Split(*sections, ",") {
		f, ok := run[s]
		if !ok {
			fmt.Fprintf(os.Stderr, "tables: unknown section %q (want accuracy, memory or latency)\n", s)
			os.Exit(2)
		}
		if err := f(os.Stdout, *keys); err != nil {
			fmt.Fprintln(os.Stderr, "tables:", err)
			os.Exit(1)
		}
	}
}

func accuracy(w io.Writer, _ int) error {
	const limit = 100
	const realWindow = time.Second
	fmt.Fprintf(w, "### Accuracy\n\n")
	fmt.Fprintf(w, "Most events admitted in any window-length interval, one key, limit %d. Exact is %d.\n", limit, limit)
	fmt.Fprintf(w, "Limiters that accept a clock run on a virtual one (window 1m); the others read the system clock\n")
	fmt.Fprintf(w, "and run the same scenario scaled down in real time (window %v).\n\n", realWindow)
	fmt.Fprintf(w, "| limiter | algorithm | clock |")
	for _, sc := range benchmarks.Scenarios {
		fmt.Fprintf(w, " %s |", sc.Name)
	}
	fmt.Fprintf(w, "\n|---|---|---|")
	for range benchmarks.Scenarios {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	var notes []string
	for _, p := range benchmarks.Peers {
		clock, window := "virtual", time.Minute
		if !p.Clock {
			clock, window = "real, scaled", realWindow
		}
		if p.Resolution > 0 {
			clock += fmt.Sprintf("; %v resolution", p.Resolution)
		}
		fmt.Fprintf(w, "| %s | %s | %s |", p.Name, p.Algorithm, clock)
		var inShorter, over []string
		for _, sc := range benchmarks.Scenarios {
			var d benchmarks.Driver = benchmarks.RealClock{}
			if p.Clock {
				d = benchmarks.NewVirtualClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			}
			at, err := benchmarks.Admitted(p, sc, d, limit, window)
			if err != nil {
				return err
			}
			n := benchmarks.MaxInWindow(at, window)
			fmt.Fprintf(w, " %d (%.2fx) |", n, float64(n)/limit)
			if p.Resolution > 0 {
				inShorter = append(inShorter, fmt.Sprintf("%s %d", sc.Name, benchmarks.MaxInWindow(at, window-p.Resolution)))
				if n > limit {
					over = append(over, fmt.Sprintf("%d (%s)", n, sc.Name))
				}
			}
		}
		fmt.Fprintln(w)
		if p.Resolution > 0 {
			note := fmt.Sprintf("%s decides at a clock read once per %v, so an event can be stamped up to %v before it happened "+
				"(longer if the goroutine that reads the clock is descheduled): its limit is promised in real time over any span of "+
				"window − resolution, here %v of a %v window. Most admitted in any %v span: %s.",
				p.Name, p.Resolution, p.Resolution, window-p.Resolution, window, window-p.Resolution, strings.Join(inShorter, ", "))
			if len(over) > 0 {
				note += fmt.Sprintf(" In a full window-length span it admitted %s: more than the limit of %d.", strings.Join(over, ", "), limit)
			} else {
				note += fmt.Sprintf(" No window-length span held more than %d.", limit)
			}
			notes = append(notes, note)
		}
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "%s\n\n", n)
	}
	return nil
}

func memory(w io.Writer, keys int) error {
	fmt.Fprintf(w, "### Memory\n\n")
	fmt.Fprintf(w, "Live heap per tracked key (after GC), %d keys, key strings counted; budget 100 per minute.\n", keys)
	fmt.Fprintf(w, "\"after idle\": %d keys with one event under a %v window and a %v sweep, measured once every key\n", keys, benchmarks.IdleWindow, benchmarks.IdleSweep)
	fmt.Fprintf(w, "has been idle and swept (keyrate: until Len() is 0; others: %v), in real time.\n\n", benchmarks.IdleWait)
	fmt.Fprintf(w, "| limiter | 1 event/key | 100 events/key | after idle | sweeper |\n|---|---:|---:|---:|---|\n")
	for _, p := range benchmarks.Peers {
		one, err := benchmarks.BytesPerKey(p, keys, 1)
		if err != nil {
			return err
		}
		hundred, err := benchmarks.BytesPerKey(p, keys, 100)
		if err != nil {
			return err
		}
		idle, err := benchmarks.BytesPerKeyAfterIdle(p, keys)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "| %s | %.0f B | %.0f B | %.0f B | %s |\n", p.Name, one, hundred, idle, p.Sweeper)
	}
	fmt.Fprintln(w)
	return memoryFull(w)
}

// memoryFull writes the table of bytes per key at the full limit, a row per
// benchmarks.MemoryCases, a column per benchmarks.MemoryPeers.
func memoryFull(w io.Writer) error {
	peers := benchmarks.MemoryPeers()
	fmt.Fprintf(w, "### Memory per key at the full limit\n\n")
	fmt.Fprintf(w, "Live heap after GC per key (HeapAlloc), key strings counted, with every key at its full limit:\n")
	fmt.Fprintf(w, "the longest window's limit of events, spread evenly over that window (one every window/limit).\n")
	fmt.Fprintf(w, "Limiters that take a clock (")
	var clocked, real []string
	for _, p := range peers {
		if p.Clock {
			clocked = append(clocked, p.Name)
		} else {
			real = append(real, p.Name)
		}
	}
	fmt.Fprintf(w, "%s) run on a virtual one, a keyrate.ManualClock moved\n", strings.Join(clocked, ", "))
	fmt.Fprintf(w, "from one event to the next, and admit every event; the others (%s) read the real clock and\n", strings.Join(real, ", "))
	fmt.Fprintf(w, "are filled as far as they admit in the seconds that takes (marked † where that is short of the limit): what each holds\n")
	fmt.Fprintf(w, "per key has a fixed size, so their memory does not depend on it. A peer under two policies is two\n")
	fmt.Fprintf(w, "limiters, one per policy, each holding every key; keyrate decides both in one (NewPolicies).\n")
	var configs []string
	for _, p := range peers {
		if _, option, ok := strings.Cut(p.Module, ", "); ok && strings.HasPrefix(p.Name, "keyrate-") {
			configs = append(configs, p.Name+" is keyrate with "+option)
		}
	}
	fmt.Fprintf(w, "%s. keyrate-coarse's logs are keyrate's.\n\n", strings.Join(configs, "; "))
	fmt.Fprintf(w, "| policy | keys |")
	for _, p := range peers {
		fmt.Fprintf(w, " %s |", p.Name)
	}
	fmt.Fprintf(w, "\n|---|---:|")
	for range peers {
		fmt.Fprintf(w, "---:|")
	}
	fmt.Fprintln(w)
	var notes []string
	for _, c := range benchmarks.MemoryCases {
		fmt.Fprintf(w, "| %s | %s |", c.Name, thousands(c.Keys))
		for _, p := range peers {
			m, err := benchmarks.BytesPerKeyFull(p, c)
			switch {
			case errors.Is(err, benchmarks.ErrUnweighted):
				fmt.Fprintf(w, " – |")
				notes = append(notes, fmt.Sprintf("– %s, %s: it takes no weights; one request per unit would cost what the rows above cost per event.", p.Name, c.Name))
				continue
			case errors.Is(err, keyrate.ErrConfig):
				// A configuration that cannot take the case's policies.
				fmt.Fprintf(w, " – |")
				notes = append(notes, fmt.Sprintf("– %s, %s: %v.", p.Name, c.Name, err))
				continue
			case err != nil:
				return err
			}
			cell := thousands(int(math.Round(m.BytesPerKey))) + " B"
			if m.Limiters > 1 {
				cell += fmt.Sprintf(" (%d limiters)", m.Limiters)
			}
			if m.Admitted < m.Calls {
				cell += " †"
				notes = append(notes, fmt.Sprintf("† %s, %s: admitted %s of the %s events per key.", p.Name, c.Name, thousands(m.Admitted), thousands(m.Calls)))
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintf(w, "%s\n", n)
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
	}
	return nil
}

// thousands formats n with commas between groups of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

func latency(w io.Writer, _ int) error {
	fmt.Fprintf(w, "### Latency while idle keys are swept\n\n")
	fmt.Fprintf(w, "One goroutine times Allow on its own key for %v after %d keys were filled (window %v,\n", benchmarks.SweepMeasure, benchmarks.SweepKeys, benchmarks.SweepWindow)
	fmt.Fprintf(w, "sweeper every %v), so the sweep of all of them falls inside the measurement. Each sample\n", benchmarks.SweepEvery)
	fmt.Fprintf(w, "includes two clock reads.\n\n")
	fmt.Fprintf(w, "| limiter | calls | p50 | p99 | p99.9 | p99.99 | max | calls >= 1ms | keys left | sweeper |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, p := range benchmarks.Peers {
		r, err := benchmarks.LatencyDuringSweep(p)
		if err != nil {
			return err
		}
		left := "?"
		if r.KeysLeft >= 0 {
			left = fmt.Sprint(r.KeysLeft)
		}
		fmt.Fprintf(w, "| %s | %d | %v | %v | %v | %v | %v | %d | %s | %s |\n", p.Name, r.Calls, r.P50, r.P99, r.P999, r.P9999, r.Max.Round(time.Microsecond), r.Over1ms, left, p.Sweeper)
	}
	fmt.Fprintln(w)
	return nil
}
