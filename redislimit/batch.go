package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Concurrent decisions share round trips: each Redis node has a batcher,
// with at most two round trips to the node in flight (maxFlights); while
// both are, the requests that arrive wait in its queue, to go together in
// the next. There is no timer: a caller that finds nothing waiting and
// room for a round trip sends its own request at once, on its own
// goroutine (with a client that stops at the deadline by itself, see the
// package doc), so a lone caller pays nothing for the batching; the queue
// is sent the moment a round trip comes back, by a goroutine that lives
// while the queue does. Each caller
// waits on its own request for at most its own budget, and gets its own
// result or error; a request whose caller has gone by the time its batch
// is sent is left out.
//
// A batch goes to Redis as few script runs as its keys' slots allow: on a
// single server (a *redis.Client) one run decides every request (up to
// maxRunRequests); elsewhere requests of one hash tag share a run, and the
// runs go as one pipeline, which go-redis sends to each slot's node,
// following MOVED and ASK.

// maxRunRequests bounds the requests one script run decides, so that one
// run holds the server for a bounded time (some 2ms on a small machine),
// whatever the queue.
const maxRunRequests = 128

// request is one caller's decision: its Redis keys, decided together,
// each at its weight under its tier, and once sent, the script's answer.
type request struct {
	keys    []string
	weights []int
	tiers   []*tier
	tag     string          // the keys' hash tag: their Cluster slot
	instant int64           // the local instant it was sent at, µs (a test's clock only)
	lease   int             // a lease of one key: the most to take (lease.go); 0: none
	ctx     context.Context // the caller's budget

	ans  answer      // set by send
	done chan answer // a queued request's answer, sent once

	// What the slices of a request of one key point into (see oneKey),
	// and the run of r alone that the direct path sends.
	key1    [1]string
	weight1 [1]int
	tier1   [1]*tier
	alone   [1]*request
}

// oneKey returns the request of key alone at weight n under tr: its slices
// point into the request itself, one allocation where there would be four
// (a decision of one key is the common one).
func oneKey(key string, n int, tr *tier, tag string, instant int64) *request {
	r := &request{tag: tag, instant: instant}
	r.key1[0], r.weight1[0], r.tier1[0] = key, n, tr
	r.keys, r.weights, r.tiers = r.key1[:], r.weight1[:], r.tier1[:]
	return r
}

// answer is the script's answer to a request: whether it was admitted and
// each key's reply, or an error (failedAt names the key at fault, for a
// script's own error).
type answer struct {
	admitted bool
	replies  []keyReply
	failedAt int
	err      error
}

// batcher sends the requests for one Redis node.
type batcher struct {
	l       *Limiter
	mu      sync.Mutex
	flights int        // round trips in flight, or about to be
	queue   []*request // what waits for the next
}

// maxFlights is how many round trips a batcher has in flight to its node
// at once. With one, the server would sit idle while the client reads a
// batch's answers, wakes its callers and gathers the next; with two, one
// batch is decided while the next is gathered.
var maxFlights = 2

// do sends r, with a batch of the requests waiting with it, and returns
// its answer once it has one, or once its budget r.ctx is done.
func (b *batcher) do(r *request) answer {
	b.mu.Lock()
	if b.flights < maxFlights && len(b.queue) == 0 && b.l.direct {
		// Nothing waiting and room for a round trip: send at once, on
		// the caller's goroutine.
		b.flights++
		b.mu.Unlock()
		r.alone[0] = r
		b.l.send(r.ctx, r.alone[:])
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flights--
			b.mu.Unlock()
		} else {
			b.mu.Unlock()
			go b.drain() // this flight's place goes to the queue
		}
		return r.ans
	}
	r.done = make(chan answer, 1)
	b.queue = append(b.queue, r)
	start := b.flights < maxFlights
	if start {
		b.flights++
	}
	b.mu.Unlock()
	if start {
		go b.drain()
	}
	select {
	case a := <-r.done:
		if errors.Is(a.err, context.DeadlineExceeded) {
			// The batch's budget is the latest of its callers', so this
			// one's has run out too, or is about to: say so in its terms.
			<-r.ctx.Done()
			a.err = r.ctx.Err()
		}
		return a
	case <-r.ctx.Done():
		return answer{err: r.ctx.Err()}
	}
}

// drain sends what the queue holds, batch after batch, until it is empty.
func (b *batcher) drain() {
	var reqs, live []*request
	for {
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.flights--
			b.mu.Unlock()
			return
		}
		reqs, b.queue = b.queue, reqs[:0]
		b.mu.Unlock()
		// Leave out the callers that have gone; the batch's budget is
		// the latest of the others'.
		live = live[:0]
		var deadline time.Time
		for _, r := range reqs {
			if r.ctx.Err() != nil {
				continue
			}
			live = append(live, r)
			if d, ok := r.ctx.Deadline(); ok && d.After(deadline) {
				deadline = d
			}
		}
		if len(live) > 0 {
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			b.l.send(ctx, live)
			cancel()
			for _, r := range live {
				r.done <- r.ans
			}
		}
		clear(reqs)
		clear(live)
	}
}

// batcherFor returns the batcher of the node that holds key.
func (l *Limiter) batcherFor(ctx context.Context, key string) *batcher {
	cc, ok := l.client.(*redis.ClusterClient)
	if !ok {
		return &l.one
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return &l.one // the pipeline finds the node, or fails
	}
	addr := node.Options().Addr
	if b, ok := l.nodes.Load(addr); ok {
		return b.(*batcher)
	}
	b, _ := l.nodes.LoadOrStore(addr, &batcher{l: l})
	return b.(*batcher)
}

// send decides reqs in as few script runs as their slots allow, under
// ctx, and sets each request's answer.
func (l *Limiter) send(ctx context.Context, reqs []*request) {
	_, single := l.client.(*redis.Client)
	if len(reqs) == 1 || single && !l.perRequest && len(reqs) <= maxRunRequests {
		// One run, the common case: no runs to build.
		v, err := l.scriptFor(reqs).run(ctx, l.client, l.runCmd(reqs)).Text()
		settle(reqs, v, err)
		return
	}
	var runs [][]*request
	if single {
		for len(reqs) > maxRunRequests {
			runs = append(runs, reqs[:maxRunRequests])
			reqs = reqs[maxRunRequests:]
		}
		runs = append(runs, reqs)
	} else {
		at := map[string]int{}
		for _, r := range reqs {
			i, ok := at[r.tag]
			if !ok || len(runs[i]) == maxRunRequests {
				i = len(runs)
				at[r.tag] = i
				runs = append(runs, nil)
			}
			runs[i] = append(runs[i], r)
		}
	}
	if l.perRequest { // measured against the runs above: see the README
		runs = runs[:0]
		for _, r := range reqs {
			runs = append(runs, []*request{r})
		}
	}
	if len(runs) == 1 {
		v, err := l.scriptFor(runs[0]).run(ctx, l.client, l.runCmd(runs[0])).Text()
		settle(runs[0], v, err)
		return
	}
	cmds := l.pipelined(ctx, runs, false)
	var again [][]*request
	for i, cmd := range cmds {
		if noScript(cmd.Err()) {
			again = append(again, runs[i])
			continue
		}
		v, err := cmd.Text()
		settle(runs[i], v, err)
	}
	if len(again) > 0 {
		for i, cmd := range l.pipelined(ctx, again, true) {
			v, err := cmd.Text()
			settle(again[i], v, err)
		}
	}
}

// pipelined sends one script run per element of runs, as one pipeline:
// EVALSHA, or EVAL with the whole script when full is set (after Redis
// said NOSCRIPT).
func (l *Limiter) pipelined(ctx context.Context, runs [][]*request, full bool) []*redis.Cmd {
	pipe := l.client.Pipeline()
	cmds := make([]*redis.Cmd, len(runs))
	for i, run := range runs {
		cmds[i] = l.scriptFor(run).cmd(ctx, l.runCmd(run), full)
		pipe.Process(ctx, cmds[i])
	}
	pipe.Exec(ctx) // each command carries its own error
	return cmds
}

// scriptFor returns the script of a run deciding reqs: under the sliding
// log, a run of one request takes the script for one (slidinglogone.go),
// which decides the common case with less work and answers alike.
func (l *Limiter) scriptFor(reqs []*request) *script {
	if l.lone != nil && len(reqs) == 1 {
		return l.lone
	}
	return l.script
}

// runCmd returns the command of one script run deciding reqs, its first
// two entries left to the script (see script.cmd): then the number of
// keys, the keys and ARGV (see appendArgs), in one slice.
func (l *Limiter) runCmd(reqs []*request) []any {
	n := 0
	var latest int64
	for _, r := range reqs {
		n += len(r.keys)
		latest = max(latest, r.instant)
	}
	var instant any = ""
	if l.clock != nil {
		instant = latest
	}
	var seen [4]*tier
	tiers := runTiers(&seen, reqs)
	cmd := make([]any, 3, 3+n+argvLen(tiers, reqs))
	cmd[2] = n
	for _, r := range reqs {
		for _, k := range r.keys {
			cmd = append(cmd, k)
		}
	}
	return appendArgs(cmd, instant, l.res, l.calendarNow(latest), tiers, reqs)
}

// settle sets the answer of each request of one script run from its reply
// v, or its error.
func settle(reqs []*request, v string, err error) {
	if err != nil {
		for _, r := range reqs {
			r.ans = answer{err: err}
		}
		return
	}
	b := []byte(v)
	for _, r := range reqs {
		policies := make([]int, len(r.tiers))
		for i, t := range r.tiers {
			policies[i] = len(t.policies)
		}
		a := &r.ans
		a.admitted, a.replies, b, a.failedAt, a.err = parseRecord(b, policies, r.lease > 0)
		if b == nil {
			// The rest cannot be read: this request and every later one
			// fail.
			for _, q := range reqs {
				if q.ans.replies == nil && q.ans.err == nil {
					q.ans.err = errors.New("the script's reply ended early")
				}
			}
			return
		}
	}
	if len(b) != 0 {
		for _, r := range reqs {
			r.ans = answer{err: fmt.Errorf("the script's reply has %d bytes too many", len(b))}
		}
	}
}
