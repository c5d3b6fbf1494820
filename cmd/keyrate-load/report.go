package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// tally counts requests by outcome: 2xx admitted, 429 rejected, anything
// else (other statuses, timeouts, connection errors) other.
type tally struct{ sent, admitted, rejected, other int }

func (t *tally) add(code int) {
	t.sent++
	switch {
	case code >= 200 && code < 300:
		t.admitted++
	case code == 429:
		t.rejected++
	default:
		t.other++
	}
}

// identityReport is one identity's share of a run, over every URL.
type identityReport struct {
	name string
	tally
	noReply int       // requests that got no reply at all
	most    int       // most admitted within one window (see MostWithin)
	from    time.Time // where that window starts
}

// checked reports whether any reply said what the limit did: 2xx or 429.
func (id identityReport) checked() bool { return id.admitted+id.rejected > 0 }

// report is what a run found, ready to print.
type report struct {
	plan
	start       time.Time
	elapsed     time.Duration // how long requests were really sent for
	interrupted bool
	seconds     []tally
	total       tally
	byURL       []tally // in the order of plan.targets
	identities  []identityReport
	unknown     int  // requests sent before any identity was known
	fromPolicy  bool // limit and window came from RateLimit-Policy
	metrics     *vegeta.Metrics
}

// analyse sorts the hits into seconds, URLs and identities and finds, for
// each identity, the most requests admitted within one window.
func analyse(p plan, o outcome) report {
	hits := o.hits
	r := report{plan: p, metrics: o.metrics, elapsed: o.elapsed, interrupted: o.interrupted}
	r.byURL = make([]tally, len(p.targets))
	names := p.keys
	if len(names) == 0 {
		names = []string{"(no " + p.header + ": the client address)"}
	}
	for _, n := range names {
		r.identities = append(r.identities, identityReport{name: n})
	}
	if len(hits) == 0 {
		return r
	}
	r.start = hits[0].sent
	for _, h := range hits {
		if h.sent.Before(r.start) {
			r.start = h.sent
		}
	}
	if r.window == 0 || r.limit == 0 {
		for _, h := range hits {
			if l, w, ok := parsePolicy(h.policy); ok {
				if r.limit == 0 {
					r.limit = l
				}
				if r.window == 0 {
					r.window = w
				}
				r.fromPolicy = true
				break
			}
		}
	}
	admitted := make([][]Span, len(r.identities))
	for _, h := range hits {
		sec := int(h.sent.Sub(r.start) / time.Second)
		for len(r.seconds) <= sec {
			r.seconds = append(r.seconds, tally{})
		}
		r.seconds[sec].add(h.code)
		r.total.add(h.code)
		if i := slices.Index(p.targets, h.target); i >= 0 {
			r.byURL[i].add(h.code)
		}
		if h.identity < 0 {
			r.unknown++
			continue
		}
		r.identities[h.identity].add(h.code)
		if h.code == 0 {
			r.identities[h.identity].noReply++
		}
		if h.code >= 200 && h.code < 300 {
			admitted[h.identity] = append(admitted[h.identity], h.span())
		}
	}
	if r.window > 0 {
		for i := range r.identities {
			r.identities[i].most, r.identities[i].from = MostWithin(admitted[i], r.window)
		}
	}
	return r
}

// excess reports whether any identity had more than the limit admitted
// within one window.
func (r report) excess() bool {
	if r.limit == 0 || r.window == 0 {
		return false
	}
	for _, id := range r.identities {
		if id.most > r.limit {
			return true
		}
	}
	return false
}

// verdict is the checkable line for one identity.
func (r report) identityVerdict(id identityReport) string {
	switch {
	case id.noReply == id.sent:
		return fmt.Sprintf("no reply to any of its %d requests: not checked", id.sent)
	case !id.checked():
		return fmt.Sprintf("no 2xx or 429 reply to any of its %d requests: not checked", id.sent)
	}
	return r.verdict(id.most, r.rateOf(id.sent))
}

// rateOf is the rate, in requests per second, that sent requests make over
// the time the run really took.
func (r report) rateOf(sent int) float64 { return float64(sent) / r.elapsed.Seconds() }

// verdict is the checkable line for one identity, or for all of them.
func (r report) verdict(most int, rate float64) string {
	switch {
	case most > r.limit:
		return fmt.Sprintf("EXCESS: %d admitted within %s, %d over the limit of %d", most, seconds(r.window), most-r.limit, r.limit)
	case most == r.limit:
		return fmt.Sprintf("held exactly %d per %s under %s requests/s", r.limit, seconds(r.window), perSecond(rate))
	default:
		return fmt.Sprintf("held: at most %d per %s under %s requests/s (limit %d not reached)", most, seconds(r.window), perSecond(rate), r.limit)
	}
}

// write prints the report: what was sent, the counts per second and per
// URL, the latencies, then each identity's verdict and the run's.
func (r report) write(w io.Writer) {
	r.writeHeading(w)
	r.writeSeconds(w)
	r.writeURLs(w)
	r.writeLatency(w)
	if r.unknown > 0 {
		fmt.Fprintf(w, "%d requests failed before they were sent and are counted in the totals only\n", r.unknown)
	}
	fmt.Fprintln(w)
	r.writeLimit(w)
	r.writeIdentities(w)
	r.writeVerdict(w)
}

// writeHeading says what the run sent, to what, from whom, and whether it
// was interrupted.
func (r report) writeHeading(w io.Writer) {
	who := "no identity header"
	if len(r.keys) > 0 {
		order := "in turn"
		if r.random {
			order = fmt.Sprintf("at random, seed %d", r.seed)
		}
		who = fmt.Sprintf("%d identities in %s, %s", len(r.keys), r.header, order)
	}
	what := r.targets[0]
	if len(r.targets) > 1 {
		what = fmt.Sprintf("%d URLs", len(r.targets))
	}
	fmt.Fprintf(w, "keyrate-load: %s %s at %d requests/s for %s, %s\n", r.method, what, r.rate, r.duration, who)
	if len(r.targets) > 1 {
		fmt.Fprintf(w, "  %s\n", strings.Join(r.targets, "\n  "))
	}
	if r.interrupted {
		fmt.Fprintf(w, "INTERRUPTED after %s of %s: %d requests sent, %s requests/s\n", round(r.elapsed), r.duration, r.total.sent, perSecond(r.rateOf(r.total.sent)))
	}
	fmt.Fprintln(w)
}

// writeSeconds is the table of each second's counts, and the total.
func (r report) writeSeconds(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "second\tsent\tadmitted\trejected\tother\t")
	for i, s := range r.seconds {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t\n", i, s.sent, s.admitted, s.rejected, s.other)
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t%d\t%d\t\n", r.total.sent, r.total.admitted, r.total.rejected, r.total.other)
	tw.Flush()
}

// writeURLs is the table of each URL's counts, for a run of several.
func (r report) writeURLs(w io.Writer) {
	if len(r.targets) <= 1 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "url\tsent\tadmitted\trejected\tother")
	for i, t := range r.byURL {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", r.targets[i], t.sent, t.admitted, t.rejected, t.other)
	}
	tw.Flush()
}

// writeLatency gives vegeta's latencies, status codes and first errors.
func (r report) writeLatency(w io.Writer) {
	m := r.metrics
	if m == nil || m.Requests == 0 {
		return
	}
	l := m.Latencies
	fmt.Fprintf(w, "\nlatency: mean %s, p50 %s, p90 %s, p95 %s, p99 %s, max %s\n",
		short(l.Mean), short(l.P50), short(l.P90), short(l.P95), short(l.P99), short(l.Max))
	var codes []string
	for _, c := range slices.Sorted(maps.Keys(m.StatusCodes)) {
		codes = append(codes, fmt.Sprintf("%s: %d", c, m.StatusCodes[c]))
	}
	fmt.Fprintf(w, "sent at %.1f requests/s; status codes %s\n", m.Rate, strings.Join(codes, ", "))
	for i, e := range m.Errors {
		if i == 3 {
			fmt.Fprintf(w, "... and %d more kinds of error\n", len(m.Errors)-3)
			break
		}
		if !strings.HasPrefix(e, "429 ") {
			fmt.Fprintf(w, "error: %s\n", e)
		}
	}
}

// writeLimit says the limit checked and where it came from.
func (r report) writeLimit(w io.Writer) {
	if r.window == 0 {
		fmt.Fprintln(w, "no window to check: pass -window and -limit, or target a server that sends RateLimit-Policy")
		return
	}
	source := "from the flags"
	if r.fromPolicy {
		source = "from the server's RateLimit-Policy"
	}
	if r.limit > 0 {
		fmt.Fprintf(w, "limit %d per %s (%s)\n", r.limit, seconds(r.window), source)
	} else {
		fmt.Fprintf(w, "window %s (%s); pass -limit to check a limit\n", seconds(r.window), source)
	}
}

// writeIdentities is the table of each identity's counts, the most it had
// admitted in a window, and its verdict.
func (r report) writeIdentities(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	header := "identity\tsent\tadmitted\trejected\tother"
	noReply := slices.ContainsFunc(r.identities, func(id identityReport) bool { return id.noReply > 0 })
	if noReply {
		header += "\tno reply"
	}
	if r.window > 0 {
		header += "\tmost in any " + seconds(r.window)
		if r.limit > 0 {
			header += "\tverdict"
		}
	}
	fmt.Fprintln(tw, header)
	for _, id := range r.identities {
		line := fmt.Sprintf("%s\t%d\t%d\t%d\t%d", id.name, id.sent, id.admitted, id.rejected, id.other)
		if noReply {
			line += fmt.Sprintf("\t%d", id.noReply)
		}
		if r.window > 0 {
			line += fmt.Sprintf("\t%d", id.most)
			if r.limit > 0 {
				line += "\t" + r.identityVerdict(id)
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}

// writeVerdict is the run's checkable line, over every identity, when
// there is a limit to check.
func (r report) writeVerdict(w io.Writer) {
	if r.window == 0 || r.limit == 0 || r.total.sent == 0 {
		return
	}
	most, over, unchecked := 0, 0, 0
	for _, id := range r.identities {
		most = max(most, id.most)
		switch {
		case id.most > r.limit:
			over++
		case !id.checked():
			unchecked++
		}
	}
	n := len(r.identities)
	verdict := r.verdict(most, r.rateOf(r.total.sent))
	if r.interrupted {
		verdict += fmt.Sprintf(", interrupted after %s of %s", round(r.elapsed), r.duration)
	}
	switch {
	case over > 0:
		fmt.Fprintf(w, "\n%d of %d identities: %s\n", over, n, verdict)
	case unchecked == n:
		fmt.Fprintf(w, "\nnot checked: no identity got a 2xx or 429 reply\n")
	case unchecked > 0:
		fmt.Fprintf(w, "\n%d of %d identities: %s; %d not checked (no 2xx or 429 reply)\n", n-unchecked, n, verdict, unchecked)
	case n == 1:
		fmt.Fprintf(w, "\nthe identity: %s\n", verdict)
	default:
		fmt.Fprintf(w, "\nall %d identities: %s\n", n, verdict)
	}
}

// seconds writes a window the way people say it: "10 s", "60 s".
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%d s", d/time.Second)
	}
	return d.String()
}

func perSecond(rate float64) string {
	return strings.TrimSuffix(fmt.Sprintf("%.1f", rate), ".0")
}

// short rounds a latency to three significant digits or so.
func short(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(10 * time.Microsecond).String()
	default:
		return d.Round(time.Millisecond).String()
	}
}
