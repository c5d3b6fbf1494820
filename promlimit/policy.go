package promlimit

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/keyrate/keyrate"
)

// maxPoliciesPerRoute bounds the policies of one route that get series of
// their own in keyrate_policy_violations_total. Policy names come from the
// backend's configuration, not from clients, so a route has a handful;
// the bound only keeps a backend that invents names (a tier per customer,
// say) from growing the series without end. Past it, further names are
// counted under policy="(other)".
const maxPoliciesPerRoute = 32

// otherPolicy labels a route's policies past maxPoliciesPerRoute.
const otherPolicy = "(other)"

// policyCounters holds one route's violation counters, by policy name.
// Reading it is lock-free and allocation-free: a route has few policies, so
// a linear scan of an immutable list beats a map, and a new name (rare:
// once per policy) copies the list under mu.
type policyCounters struct {
	vec   *prometheus.CounterVec
	route string
	list  atomic.Pointer[[]policyCounter]
	mu    sync.Mutex
}

type policyCounter struct {
	name string
	c    prometheus.Counter
}

// observe counts d's violations: one for each policy that refused it. A
// Decision that no policy refused (Allowed) counts nothing, but gives each
// of its policies its series, at 0, so that a rate over it sees the first
// violation. An Overflow refusal violated no policy of the client's, and
// counts nothing.
func (p *policyCounters) observe(d *keyrate.Decision) {
	parts := d.Policies()
	if len(parts) == 0 { // a Decision filled in by hand: its binding policy alone
		c := p.counter(d.Policy)
		if !d.Allowed && !d.Overflow {
			c.Inc()
		}
		return
	}
	for i := range parts {
		c := p.counter(parts[i].Name)
		if !parts[i].Allowed && !d.Overflow {
			c.Inc()
		}
	}
}

// counter returns the counter of the policy named name, creating it at 0.
func (p *policyCounters) counter(name string) prometheus.Counter {
	if list := p.list.Load(); list != nil {
		for _, pc := range *list {
			if pc.name == name {
				return pc.c
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var old []policyCounter
	if list := p.list.Load(); list != nil {
		old = *list
	}
	label := name
	if len(old) >= maxPoliciesPerRoute {
		label = otherPolicy
	}
	for _, pc := range old {
		if pc.name == name || pc.name == label {
			return pc.c
		}
	}
	// Past the bound, name is not added: it is found as (other) each time.
	list := append(old[:len(old):len(old)], policyCounter{label, p.vec.WithLabelValues(p.route, label)})
	p.list.Store(&list)
	return list[len(list)-1].c
}
