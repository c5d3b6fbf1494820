// Command keyrate-load sends constant-rate HTTP load from one or many client
// identities, to one URL or spread over several (replicas behind one shared
// limit), and checks the rate limit the server holds.
//
// It uses vegeta as a library for the load. While it runs it writes a line
// each second to standard error; at the end it reports requests admitted
// (2xx) and rejected (429) per second, latency percentiles, and for each
// identity, over all the URLs, the most requests admitted within any
// window-length interval, with a line such as
//
//	all 5 identities: held exactly 5 per 10 s under 200 requests/s
//
// The window and limit come from -window and -limit, or else from the
// server's RateLimit-Policy field. Ctrl-C stops the run early: the report
// then covers the requests sent until then, at the rate they were really
// sent, and says the run was interrupted.
//
// Exit status: 0 when the run completed (and the limit held), 3 when some
// identity got more than the limit admitted within one window (even in an
// interrupted run), 130 when the run was interrupted, 1 when the run could
// not be made (no request got a 2xx or 429 reply), and 2 for bad flags.
//
// Example, against the demo server:
//
//	go run . -url http://127.0.0.1:8080/api/search -rate 200 -duration 10s -key-count 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	// After the first Ctrl-C, which ends the run and prints its report, a
	// second one stops the program at once.
	context.AfterFunc(ctx, stop)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr, defaultTransport()))
}

// Exit statuses.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitExcess      = 3
	exitInterrupted = 130 // as a shell reports a program ended by Ctrl-C
)

// run is the whole program over the given transport, so tests can drive it
// against an in-process server.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, transport http.RoundTripper) int {
	p, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, "keyrate-load:", err)
		return exitUsage
	}
	o := attack(ctx, p, transport, &progress{w: stderr})
	if len(o.hits) == 0 {
		if o.interrupted {
			fmt.Fprintln(stderr, "keyrate-load: interrupted before any request was sent")
			return exitInterrupted
		}
		fmt.Fprintln(stderr, "keyrate-load: no requests were sent")
		return exitFailed
	}
	r := analyse(p, o)
	r.write(stdout)
	switch {
	case r.excess():
		return exitExcess
	case o.interrupted:
		return exitInterrupted
	case r.total.admitted+r.total.rejected == 0:
		fmt.Fprintln(stderr, "keyrate-load: no request got a 2xx or 429 reply")
		return exitFailed
	}
	return exitOK
}

// urls collects a repeatable -url flag.
type urls []string

func (u *urls) String() string { return strings.Join(*u, " ") }

func (u *urls) Set(v string) error {
	*u = append(*u, v)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (plan, error) {
	fs := flag.NewFlagSet("keyrate-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: keyrate-load -url URL [-url URL...] [flags]\n\nConstant-rate load from one or many identities, spread over the URLs; checks the limit the server holds.\n\nflags:")
		fs.PrintDefaults()
	}
	var p plan
	var keys string
	var count int
	var pick string
	fs.Var((*urls)(&p.targets), "url", "`URL` to load, such as http://127.0.0.1:8080/api/status (required; repeat it to spread the requests over several, in turn or at random as -pick says)")
	fs.StringVar(&p.method, "method", http.MethodGet, "request `method`")
	fs.IntVar(&p.rate, "rate", 50, "requests per second, over all identities")
	fs.DurationVar(&p.duration, "duration", 10*time.Second, "how long to send for")
	fs.DurationVar(&p.timeout, "timeout", 5*time.Second, "time limit for each request")
	fs.StringVar(&p.header, "header", "X-API-Key", "request header that carries the identity")
	fs.StringVar(&keys, "keys", "", "comma-separated identities to send, such as alice,bob")
	fs.IntVar(&count, "key-count", 0, "send `n` generated identities, load-1 to load-n (instead of -keys)")
	fs.StringVar(&pick, "pick", "turn", "how each request picks its identity and URL: turn (round robin) or random")
	fs.Uint64Var(&p.seed, "seed", 1, "seed for -pick random, so a run can be repeated")
	fs.DurationVar(&p.window, "window", 0, "window length to check: the most admitted per identity in any interval this long (default: from RateLimit-Policy)")
	fs.IntVar(&p.limit, "limit", 0, "the limit per window to check against (default: from RateLimit-Policy)")
	if err := fs.Parse(args); err != nil {
		return plan{}, err
	}
	if fs.NArg() > 0 {
		return plan{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case keys != "" && count != 0:
		return plan{}, errors.New("give -keys or -key-count, not both")
	case count < 0 || count > 1_000_000:
		return plan{}, fmt.Errorf("-key-count is %d, want 1 to 1000000", count)
	case keys != "":
		p.keys = strings.Split(keys, ",")
	case count > 0:
		for i := range count {
			p.keys = append(p.keys, fmt.Sprintf("load-%d", i+1))
		}
	}
	switch pick {
	case "turn", "round-robin":
	case "random":
		p.random = true
	default:
		return plan{}, fmt.Errorf("-pick is %q, want turn or random", pick)
	}
	return p, p.validate()
}
