package otellimit

import (
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/keyrate/keyrate"
)

// maxPoliciesPerRoute bounds the policies of one route that get series of
// their own in keyrate.policy.violations, as promlimit's does. Policy names
// come from the backend's configuration, not from clients, so a route has
// a handful; the bound only keeps a backend that invents names (a tier per
// customer, say) from growing the series without end. Past it, further
// names are counted under keyrate.policy="(other)".
const maxPoliciesPerRoute = 32

// otherPolicy names a route's policies past maxPoliciesPerRoute.
const otherPolicy = "(other)"

// policyCounters holds one route's violation counts, by policy name.
// Reading it is lock-free and allocation-free: a route has few policies,
// so a linear scan of an immutable list beats a map, and a new name (rare:
// once per policy) copies the list under mu.
type policyCounters struct {
	route string
	list  atomic.Pointer[[]*policySeries]
	mu    sync.Mutex
}

type policySeries struct {
	name  string
	count atomic.Int64
	opts  []metric.ObserveOption
}

// observe counts d's violations: one for each policy that refused it. A
// Decision that no policy refused (Allowed) counts nothing, but gives each
// of its policies its series, at 0, so that a rate over it sees the first
// violation. An Overflow refusal violated no policy of the client's, and
// counts nothing.
func (p *policyCounters) observe(d *keyrate.Decision) {
	parts := d.Policies()
	if len(parts) == 0 { // a Decision filled in by hand: its binding policy alone
		s := p.series(d.Policy)
		if !d.Allowed && !d.Overflow {
			s.count.Add(1)
		}
		return
	}
	for i := range parts {
		s := p.series(parts[i].Name)
		if !parts[i].Allowed && !d.Overflow {
			s.count.Add(1)
		}
	}
}

// series returns the series of the policy named name, creating it at 0.
func (p *policyCounters) series(name string) *policySeries {
	if list := p.list.Load(); list != nil {
		for _, s := range *list {
			if s.name == name {
				return s
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var old []*policySeries
	if list := p.list.Load(); list != nil {
		old = *list
	}
	value := name
	if len(old) >= maxPoliciesPerRoute {
		value = otherPolicy
	}
	for _, s := range old {
		if s.name == name || s.name == value {
			return s
		}
	}
	// Past the bound, name is not added: it is found as (other) each time.
	s := &policySeries{name: value, opts: observeOpts(p.route, attribute.String(keyPolicy, value))}
	list := append(old[:len(old):len(old)], s)
	p.list.Store(&list)
	return s
}

// collect reports each policy's count to the SDK.
func (p *policyCounters) collect(o metric.Observer, violations metric.Int64Observable) {
	if list := p.list.Load(); list != nil {
		for _, s := range *list {
			o.ObserveInt64(violations, s.count.Load(), s.opts...)
		}
	}
}
