package main

import (
	"fmt"
	"io"
	"time"
)

// progress writes a line each second while a run goes, with the replies
// that came in during that second, so that a long run shows it is alive.
// The report at the end counts by the second each request was sent in; this
// counts by arrival, as it happens.
type progress struct {
	w             io.Writer
	second, total tally
}

func (p *progress) begin() {
	fmt.Fprintln(p.w, "keyrate-load: replies each second (Ctrl-C stops the run and reports what it got)")
	fmt.Fprintf(p.w, "%6s  %7s  %8s  %8s  %5s  %7s\n", "at", "replies", "admitted", "rejected", "other", "so far")
}

func (p *progress) add(code int) {
	p.second.add(code)
	p.total.add(code)
}

// line ends a second of the run, at elapsed since its start.
func (p *progress) line(at time.Duration) {
	p.write(fmt.Sprintf("%ds", int(at.Round(time.Second)/time.Second)))
}

func (p *progress) write(label string) {
	s := p.second
	fmt.Fprintf(p.w, "%6s  %7d  %8d  %8d  %5d  %7d\n", label, s.sent, s.admitted, s.rejected, s.other, p.total.sent)
	p.second = tally{}
}

func (p *progress) interrupted(at time.Duration) {
	fmt.Fprintf(p.w, "keyrate-load: interrupted after %s; no more requests are sent, waiting for replies in flight\n", round(at))
}

// end writes the replies that came after the last whole second.
func (p *progress) end() {
	if p.second.sent > 0 {
		p.write("end")
	}
}

// round writes a duration to a tenth of a second at most: 3s, 2.5s.
func round(d time.Duration) string {
	return d.Round(100 * time.Millisecond).String()
}
