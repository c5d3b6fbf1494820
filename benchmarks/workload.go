package benchmarks

import (
	"fmt"
	"time"
)

// Path is which side of the decision a workload exercises.
type Path string

const (
	// Deny: every key's budget is spent before timing starts, so every timed
	// call is refused.
	Deny Path = "deny"
	// Admit: the budget is one no run can spend, so every timed call is
	// admitted and recorded.
	Admit Path = "admit"
)

// Paths lists both paths, deny first.
var Paths = []Path{Deny, Admit}

// Config returns the configuration every limiter gets on path p.
//
// Deny: 100 events per minute per key (token buckets: burst 100, refill 100
// per minute), the budget the comparison is about.
//
// Admit: 2^30 events per minute. A small budget cannot keep a hot key
// admitting (it refuses after 100 calls), and a short window does not help
// every peer: go-limiter computes its refill as ticks * (interval/tokens),
// which refills only 10 of 100 tokens per 1µs tick. A budget no run can
// spend is the one configuration on which every limiter admits every call.
// keyrate, being a sliding log, then stores every admitted event (8 bytes
// each); that cost shows in its B/op.
func (p Path) Config() Config {
	if p == Admit {
		return Config{Limit: 1 << 30, Window: time.Minute}
	}
	return Config{Limit: 100, Window: time.Minute}
}

// Check returns an error unless admits out of n calls matches the path: on
// the deny path at most 1% admitted, on the admit path at least 99% of the
// calls that got a decision (errs is how many got an error instead).
func (p Path) Check(admits, errs, n int) error {
	if n <= errs {
		return nil
	}
	ratio := float64(admits) / float64(n-errs)
	switch {
	case p == Deny && ratio > 0.01:
		return fmt.Errorf("deny path admitted %d of %d calls (%.3f/op): the budget was not spent", admits, n, ratio)
	case p == Admit && ratio < 0.99:
		return fmt.Errorf("admit path admitted only %d of %d calls (%.3f/op): the budget ran out", admits, n, ratio)
	}
	return nil
}

// Prepare readies l for path p on keys before timing starts. On the deny
// path it spends every key's budget; on the admit path it admits one event
// per key, so that the timed calls find tracked keys with budget left (the
// cost of creating keys is measured separately, by the memory table).
func (p Path) Prepare(l Limiter, keys []string) {
	for _, k := range keys {
		if p == Deny {
			l.Exhaust(k)
		} else {
			l.Allow(k)
		}
	}
}
