package benchmarks

import (
	"fmt"
	"time"
)

// The budget every limiter gets in the throughput benchmarks, on both paths:
// BudgetLimit events per BudgetWindow per key (token buckets: burst 100,
// refill 100 per minute).
const (
	BudgetLimit  = 100
	BudgetWindow = time.Minute
)

// PerKey is how many timed calls the admit path makes on one key: its budget
// less the one event admitted while the key was prepared. After PerKey calls
// a key is at its limit, so the admit workloads move on to fresh keys (see
// rotation.go) instead of calling it again.
const PerKey = BudgetLimit - 1

// Budget returns the configuration every limiter gets in the throughput
// benchmarks.
func Budget() Config { return Config{Limit: BudgetLimit, Window: BudgetWindow} }

// Path is which side of the decision a workload exercises.
type Path string

const (
	// Deny: every key's budget is spent before timing starts, so every timed
	// call is refused.
	Deny Path = "deny"
	// Admit: every key stays within its budget for the whole run (each is
	// called at most PerKey times after one prepared event), so every timed
	// call is admitted and recorded.
	Admit Path = "admit"
)

// Paths lists both paths, deny first.
var Paths = []Path{Deny, Admit}

// Check returns an error unless admits out of n calls matches the path (errs
// of them got an error instead of a decision). On the deny path at most 1%
// may be admitted: a token bucket refills one event per 600 ms and a fixed
// window may turn during the run. On the admit path no key is ever past its
// budget, so every call that got a decision must have been admitted: a
// single refusal means a workload called a key more often than it promised.
func (p Path) Check(admits, errs, n int) error {
	decided := n - errs
	if decided <= 0 {
		return nil
	}
	switch {
	case p == Deny && float64(admits) > 0.01*float64(decided):
		return fmt.Errorf("deny path admitted %d of %d calls (%.3f/op): the budget was not spent", admits, decided, float64(admits)/float64(decided))
	case p == Admit && admits != decided:
		return fmt.Errorf("admit path refused %d of %d calls: a key was called past its budget", decided-admits, decided)
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

// UntilClearOfBoundary returns how long to wait from now so that no boundary
// of windows of length w, aligned to the Unix epoch, falls within the next
// margin: 0 when the next boundary is at least margin away, else the time
// until that boundary, after which the one after is w away. A w no longer
// than margin can never be clear, and gets 0.
func UntilClearOfBoundary(now time.Time, w, margin time.Duration) time.Duration {
	if w <= margin {
		return 0
	}
	into := now.UnixNano() % int64(w)
	if into < 0 { // before 1970
		into += int64(w)
	}
	next := w - time.Duration(into)
	if next >= margin {
		return 0
	}
	return next
}
