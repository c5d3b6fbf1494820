package benchcmp_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// TestGCRAMatchesRedisRate plays the same weights on redislimit's GCRA and
// on redis_rate (burst = limit, rate = limit per period), on one server,
// and compares their answers: both decide on the server's clock, each at
// its own instants, a few microseconds apart.
//
// Each sequence takes far less than a refill interval, so what either
// admits, and Remaining, depend on the calls alone and must be equal;
// RetryAfter and ResetAfter may differ by the time between the two
// libraries' calls (at most the sequence's length so far) and, where
// period/limit is not a whole number of microseconds, by the microsecond
// redislimit rounds each refill interval up to, per token; there
// redis_rate's floating-point seconds may also floor Remaining to one
// fewer than the tokens left (5 of 7 per day read as 4.999..., so 4),
// where redislimit counts exactly. Where the
// libraries mean different things, the test checks each side's meaning:
// an admission's RetryAfter is -1 in redis_rate and 0 here; a refusal's
// Remaining is 0 in redis_rate and here the tokens still in the bucket
// (which a smaller request may take); a weight above the burst is refused
// by both, with a RetryAfter here of 0, as it can never fit (redis_rate
// gives the time it would take to refill past the burst).
func TestGCRAMatchesRedisRate(t *testing.T) {
	client := newClient(t, redistest.StartT(t).Addr())
	ctx := context.Background()
	rr := redis_rate.NewLimiter(client)
	for i, c := range []struct {
		limit   int
		period  time.Duration
		weights []int
	}{
		{10, time.Hour, []int{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
		{10, time.Hour, []int{0, 3, 4, 4, 2, 1, 0, 1, 11, 2}},
		{100, time.Hour, []int{30, 30, 30, 20, 9, 1, 1, 101, 0}},
		{7, 24 * time.Hour, []int{2, 2, 2, 2, 1, 1, 8, 1}},
		{3, 10 * time.Minute, []int{1, 3, 1, 1, 1, 2, 0}},
	} {
		l, err := redislimit.New(client, c.limit, c.period, redislimit.WithAlgorithm(keyrate.GCRA),
			redislimit.WithPrefix("gcra-agree:"))
		if err != nil {
			t.Fatal(err)
		}
		rate := redis_rate.Limit{Rate: c.limit, Burst: c.limit, Period: c.period}
		key := "agree-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		began := time.Now()
		tokens := 0 // spent, as both count them
		for step, n := range c.weights {
			theirs, err := rr.AllowN(ctx, key, rate, n)
			if err != nil {
				t.Fatal(err)
			}
			ours, err := l.TakeContext(ctx, key, n)
			if err != nil {
				t.Fatal(err)
			}
			slack := time.Since(began) + time.Duration(c.limit+n+1)*time.Microsecond
			near := func(a, b time.Duration) bool { return a-b <= slack && b-a <= slack }
			fits := n <= c.limit && tokens+n <= c.limit
			at := func(what string) string {
				return "limit " + strconv.Itoa(c.limit) + " per " + c.period.String() + ", step " + strconv.Itoa(step) +
					", weight " + strconv.Itoa(n) + ": " + what
			}
			if ours.Allowed != fits || (theirs.Allowed > 0) != (fits && n > 0) {
				t.Fatalf("%s: admitted %v here, %d by redis_rate; want %v", at("allowed"), ours.Allowed, theirs.Allowed, fits)
			}
			if fits {
				tokens += n
				// redis_rate divides float seconds: with a refill interval
				// of no exact binary value, 4.99999... tokens floor to 4.
				floored := c.period%time.Duration(c.limit) != 0 && theirs.Remaining == ours.Remaining-1
				if ours.Remaining != c.limit-tokens || ours.Remaining != theirs.Remaining && !floored {
					t.Fatalf("%s: %d here, %d by redis_rate; want %d", at("remaining"), ours.Remaining, theirs.Remaining, c.limit-tokens)
				}
				if ours.RetryAfter != 0 || n > 0 && theirs.RetryAfter != -1 {
					t.Fatalf("%s: %v here, %v by redis_rate", at("admitted, RetryAfter"), ours.RetryAfter, theirs.RetryAfter)
				}
			} else {
				if theirs.Remaining != 0 || ours.Remaining != c.limit-tokens {
					t.Fatalf("%s: %d here, %d by redis_rate; want %d here, 0 there", at("refused, remaining"), ours.Remaining, theirs.Remaining, c.limit-tokens)
				}
				switch {
				case n > c.limit && (ours.RetryAfter != 0 || theirs.RetryAfter <= 0):
					t.Fatalf("%s: %v here, %v by redis_rate; want 0 here (it can never fit)", at("over the burst, RetryAfter"), ours.RetryAfter, theirs.RetryAfter)
				case n <= c.limit && !near(ours.RetryAfter, theirs.RetryAfter):
					t.Fatalf("%s: %v here, %v by redis_rate, want them within %v", at("RetryAfter"), ours.RetryAfter, theirs.RetryAfter, slack)
				}
			}
			if !near(ours.ResetAfter, theirs.ResetAfter) {
				t.Fatalf("%s: %v here, %v by redis_rate, want them within %v", at("ResetAfter"), ours.ResetAfter, theirs.ResetAfter, slack)
			}
		}
	}
}
