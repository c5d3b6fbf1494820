package redislimit_test

import (
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
)

// gcraModel is GCRA in Redis, naively, in whole microseconds: per refill
// interval T a theoretical arrival time (the instant the bucket is full
// again), and the key's refund ledger. It is what gcra.go and refund.go
// say, written again in Go, so that random sequences can check every
// number the scripts give.
type gcraModel struct {
	tat    map[int64]int64 // by T, µs
	ledger int64           // weight refunded in this generation
	gen    int             // the key's generations so far: 0 before the first admission
}

// The ledger's top (what a receipt holds) and the point past which an
// admission at full buckets starts a new generation.
const (
	modelLedgerTop   = 1<<48 - 1
	modelLedgerRenew = 1 << 47
)

// gcraTaken is what the model keeps of an admission: its instant, weight
// left, every policy's T and E (the TAT it left, which the Decision's
// ResetAfter, at most the window, may not say), and the ledger at the
// decision.
type gcraTaken struct {
	at, ledger int64
	n, gen     int
	t, e       []int64
}

func refillEvery(p keyrate.Policy) int64 {
	w := p.Window.Microseconds()
	return (w + int64(p.Limit) - 1) / int64(p.Limit)
}

// decide returns each policy's part of a request of weight n at now
// (µs), the Decision Combine makes of them, and what an admission took.
func (m *gcraModel) decide(now int64, n int, policies []keyrate.Policy) (keyrate.Decision, *gcraTaken) {
	if m.tat == nil {
		m.tat = map[int64]int64{}
	}
	full := make([]int64, len(policies))
	allowed := n >= 0
	for i, p := range policies {
		T := refillEvery(p)
		full[i] = max(m.tat[T]-now, 0)
		if n > p.Limit || full[i]+int64(n)*T > int64(p.Limit)*T {
			allowed = false
		}
	}
	if n == 0 {
		allowed = true
	}
	record := allowed && n > 0
	var tk *gcraTaken
	if record {
		idle := true
		for _, f := range full {
			idle = idle && f == 0
		}
		if m.gen == 0 || idle && m.ledger >= modelLedgerRenew {
			m.gen, m.ledger = m.gen+1, 0
		}
		tk = &gcraTaken{at: now, ledger: m.ledger, n: n, gen: m.gen}
		for i, p := range policies {
			T := refillEvery(p)
			full[i] += int64(n) * T
			m.tat[T] = now + full[i]
		}
	}
	parts := make([]keyrate.PolicyDecision, len(policies))
	for i, p := range policies {
		T, f, limit := refillEvery(p), full[i], int64(p.Limit)
		tokens := (f + T - 1) / T
		var retry, refill int64
		if !record && n > 0 && n <= p.Limit && f+int64(n)*T > limit*T {
			retry = f + int64(n)*T - limit*T
		}
		if f > 0 {
			refill = f - (tokens-1)*T
		}
		us := time.Microsecond
		parts[i] = keyrate.PolicyDecision{
			Policy:      p,
			Allowed:     n == 0 || n > 0 && n <= p.Limit && retry == 0,
			Remaining:   int(max(limit-tokens, 0)),
			RetryAfter:  time.Duration(retry) * us,
			ResetAfter:  min(time.Duration(f)*us, p.Window),
			RefillAfter: min(time.Duration(refill)*us, p.Window),
		}
		if tk != nil {
			tk.t = append(tk.t, T)
			tk.e = append(tk.e, now+f)
		}
	}
	return backend.Combine(parts...), tk
}

// refund gives back n of tk's weight at now, as gcraRefundSource does, and
// reports whether any bucket got something back.
func (m *gcraModel) refund(now int64, tk *gcraTaken, n int) bool {
	if tk.gen != m.gen || m.ledger+int64(n) > modelLedgerTop {
		return false
	}
	// Past 2^32µs of refills, since moves every span before now.
	since := min(m.ledger-tk.ledger, 1<<32)
	give := map[int64]int64{}
	for i, T := range tk.t {
		g := min(int64(n)*T, tk.e[i]-since*T-now)
		if prev, ok := give[T]; !ok || g < prev {
			give[T] = g
		}
	}
	gave := false
	for T, g := range give {
		if tat := m.tat[T]; tat > now && g > 0 {
			m.tat[T] = max(tat-g, now)
			gave = true
		}
	}
	if gave {
		m.ledger += int64(n)
		tk.n -= n
	}
	return gave
}
