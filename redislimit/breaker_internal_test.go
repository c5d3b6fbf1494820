package redislimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply of Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// The breaker's schedule, as a trace over fixed instants: a failure opens
// it with the first probe due 100ms later; one probe at a time; each
// failed probe doubles the delay up to 1s; a successful one closes it, and
// the next failure starts the schedule over.
func TestBreakerSchedule(t *testing.T) {
	ms := func(n int) int64 { return int64(time.Duration(n) * time.Millisecond) }
	down := errors.New("down")
	var b breaker
	if !b.closed() || b.startProbe(0) {
		t.Fatal("a new breaker: want closed, with no probe to start")
	}
	b.trip(ms(1000), down)
	if b.closed() {
		t.Fatal("after a failure: want open")
	}
	if b.startProbe(ms(1099)) {
		t.Fatal("a probe 99ms after the failure, want none before 100ms")
	}
	b.trip(ms(1050), errors.New("later")) // a call in flight failing too keeps the schedule
	if since, cause := b.state(); since != ms(1000) || cause == nil || cause.Error() != "later" {
		t.Fatalf("state = %v, %v; want open since 1s with the latest cause", since, cause)
	}
	if !b.startProbe(ms(1100)) {
		t.Fatal("no probe at 100ms")
	}
	if b.startProbe(ms(1100)) || b.startProbe(ms(5000)) {
		t.Fatal("a second probe while one is in flight")
	}

	// Each failed probe doubles the delay from its end, up to 1s.
	at := ms(1300) // the probe ran out of a 200ms budget
	for i, delay := range []int{200, 400, 800, 1000, 1000} {
		b.probed(at, down)
		if b.closed() {
			t.Fatalf("failed probe %d closed the breaker", i)
		}
		if b.startProbe(at + ms(delay) - 1) {
			t.Fatalf("failed probe %d: the next started before %dms", i, delay)
		}
		if !b.startProbe(at + ms(delay)) {
			t.Fatalf("failed probe %d: no probe %dms later", i, delay)
		}
		at += ms(delay)
	}

	b.probed(at, nil)
	if !b.closed() || b.startProbe(at+ms(5000)) {
		t.Fatal("after a successful probe: want closed, with no probe to start")
	}
	if _, cause := b.state(); cause != nil {
		t.Fatalf("a closed breaker reports %v", cause)
	}
	b.trip(at+ms(10), down)
	if b.startProbe(at+ms(109)) || !b.startProbe(at+ms(110)) {
		t.Fatal("after it opens again, the first probe is due 100ms later")
	}
}

// Only what is not an answer of Redis, or a reply that it cannot serve
// now, counts as Redis not answering.
func TestUnanswered(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{refused, true},
		{io.EOF, true},
		{context.DeadlineExceeded, true},
		{fmt.Errorf("i/o: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{redis.ErrClosed, true},
		{redis.ErrPoolTimeout, true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."), true},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("READONLY You can't write against a read only replica."), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("NOREPLICAS Not enough good replicas to write."), true},
		{replyError("ERR max number of clients reached"), true},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyError("ERR Error running script: not a keyrate log"), false},
		{replyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{replyError("NOSCRIPT No matching script. Please use EVAL."), false},
		{replyError("WRONGPASS invalid username-password pair or user is disabled."), false},
	} {
		if got := unanswered(c.err); got != c.want {
			t.Errorf("unanswered(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
