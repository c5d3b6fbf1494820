package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// The HTTP goals: httplimit faster than every peer, and at most
// maxHTTPAllocs allocations per request.
const maxHTTPAllocs = 2

// writeHTTP writes the HTTP middleware section from benchstat's CSV of
// BenchmarkHTTP (-col /lib, httplimit first): ns per request with each
// peer's time over httplimit's and httplimit's lead over the fastest peer,
// then allocations and bytes per request.
func writeHTTP(w io.Writer, csvPath string) error {
	ht, err := parse(csvPath)
	if err != nil {
		return err
	}
	sec := ht["sec/op"]
	if sec == nil || len(sec.cols) < 2 || sec.cols[0] != "httplimit" {
		return fmt.Errorf("%s: no sec/op table with httplimit as its first column and a peer", csvPath)
	}
	base, peers := sec.cols[0], sec.cols[1:]
	fmt.Fprintf(w, "## HTTP middleware: ns per request\n\n")
	fmt.Fprintf(w, "`BenchmarkHTTP`: the same trivial handler behind each middleware, 100 requests per minute per client address\n")
	fmt.Fprintf(w, "(RemoteAddr), 256 addresses in use at a time, each middleware writing its default headers.\n")
	fmt.Fprintf(w, "Each peer's cell is its median and, in brackets, its time divided by %s's (above 1: %s is faster).\n", base, base)
	fmt.Fprintf(w, "\"lead\" is the fastest peer's time divided by %s's; the goal is above 1 (otherwise ✗).\n\n", base)
	fmt.Fprintf(w, "| path | cpu | %s | fastest peer | lead |\n|---|---:|%s---|---:|\n", strings.Join(sec.cols, " | "), strings.Repeat("---:|", len(sec.cols)))
	var behind []string
	for _, row := range sec.rows {
		_, path, cpu := splitName(row)
		fmt.Fprintf(w, "| %s | %s |", path, cpu)
		b, ok := sec.val[row][base]
		if ok {
			fmt.Fprintf(w, " **%s** |", ns(b))
		} else {
			fmt.Fprintf(w, " – |")
		}
		fastest, fastestName := 0.0, ""
		for _, c := range peers {
			v, found := sec.val[row][c]
			switch {
			case !found:
				fmt.Fprintf(w, " – |")
				continue
			case ok:
				fmt.Fprintf(w, " %s (%.2f) |", ns(v), v/b)
			default:
				fmt.Fprintf(w, " %s |", ns(v))
			}
			if fastestName == "" || v < fastest {
				fastest, fastestName = v, c
			}
		}
		if !ok || fastestName == "" {
			fmt.Fprintf(w, " %s | – |\n", fastestName)
			continue
		}
		lead, mark := fastest/b, ""
		if lead <= 1 {
			mark = " ✗"
			behind = append(behind, fmt.Sprintf("%s/cpu=%s (%.2fx vs %s)", path, cpu, lead, fastestName))
		}
		fmt.Fprintf(w, " %s | %.2f%s |\n", fastestName, lead, mark)
	}
	fmt.Fprintln(w)
	if len(behind) > 0 {
		fmt.Fprintf(w, "%s not faster than every peer: %s.\n\n", base, strings.Join(behind, "; "))
	} else {
		fmt.Fprintf(w, "%s is faster than every peer on every row.\n\n", base)
	}

	allocs, bytes := ht["allocs/op"], ht["B/op"]
	if allocs == nil {
		return nil
	}
	fmt.Fprintf(w, "### Allocations per request\n\nallocs/op, and B/op in brackets. The goal for %s is at most %d allocations (above it: ✗).\n\n", base, maxHTTPAllocs)
	fmt.Fprintf(w, "| path | cpu | %s |\n|---|---:|%s\n", strings.Join(allocs.cols, " | "), strings.Repeat("---:|", len(allocs.cols)))
	var over []string
	for _, row := range allocs.rows {
		_, path, cpu := splitName(row)
		fmt.Fprintf(w, "| %s | %s |", path, cpu)
		for _, c := range allocs.cols {
			a, ok := allocs.val[row][c]
			if !ok {
				fmt.Fprintf(w, " – |")
				continue
			}
			cell := strconv.FormatFloat(a, 'g', 3, 64)
			if bytes != nil {
				if v, ok := bytes.val[row][c]; ok {
					cell += " (" + strconv.FormatFloat(v, 'g', 3, 64) + ")"
				}
			}
			if c == base && a > maxHTTPAllocs {
				cell += " ✗"
				over = append(over, fmt.Sprintf("%s/cpu=%s (%s)", path, cpu, strconv.FormatFloat(a, 'g', 3, 64)))
			}
			fmt.Fprintf(w, " %s |", cell)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	if len(over) > 0 {
		fmt.Fprintf(w, "%s above %d allocations per request: %s.\n\n", base, maxHTTPAllocs, strings.Join(over, "; "))
	}
	return nil
}
