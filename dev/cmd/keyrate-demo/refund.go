package main

import (
	"context"
	"fmt"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/middleware/adapter"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

// refundable is a budget whose events can be given back: the in-process
// Limiter and the Redis one are both, and both bound their own calls and
// list their policies, which the middleware reads.
type refundable interface {
	keyrate.Backend
	backend.Refunder
	backend.Bounded
	backend.Described
}

// refundReporter is a budget whose requests the middleware may give back,
// wholly (httplimit.WithRefund, or a reservation that was not used at
// all) or in part (middleware.ReportWeight): each refund it makes is
// published like a decision, so that the log and the page show what the
// request no longer counts.
type refundReporter struct {
	refundable
	route   string
	settles bool // the route reserves a cost that its requests settle
	tokens  bool // the route is a token budget's (route.Requests)
	publish func(decision)
}

// newRefundReporter returns b, which must be an in-process or a Redis
// Limiter, as a refundReporter. settles says that rt's requests reserve a
// cost and settle it.
func newRefundReporter(b keyrate.Backend, rt route, publish func(decision)) (keyrate.Backend, error) {
	r, ok := b.(refundable)
	if !ok {
		return nil, fmt.Errorf("route %s: a budget of %T cannot give requests back", rt.Name, b)
	}
	return refundReporter{refundable: r, route: rt.Name, settles: rt.Cost != nil, tokens: rt.Requests != nil, publish: publish}, nil
}

// TakeAll decides a token budget's request (httplimit.WithTokenBudget)
// as the budget's own TakeAll does.
func (r refundReporter) TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	all, ok := r.refundable.(backend.AllTaker)
	if !ok {
		return nil, false, fmt.Errorf("route %s: a budget of %T cannot decide several keys at once", r.route, r.refundable)
	}
	return all.TakeAll(ctx, hits)
}

// RefundN gives back n of the events of the admitted decision *d
// for key, as the budget's own does, and publishes that it did, with the
// key's budget as it then stands.
func (r refundReporter) RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error {
	receipt := d.Receipt // the refund lowers it
	if err := r.refundable.RefundN(ctx, key, d, n); err != nil {
		return err
	}
	r.published(ctx, key, receipt, n)
	return nil
}

// published publishes the refund of given of the events of the decision
// whose Receipt was receipt, with the key's budget as it now stands.
func (r refundReporter) published(ctx context.Context, key string, receipt keyrate.Receipt, given int) {
	// httplimit asks about route + "\x00" + the client's identity, and
	// under a token budget the budget's suffix after it. The page draws
	// the tokens; the request, given back whole with them, is not shown.
	identity := strings.TrimPrefix(key, r.route+"\x00")
	if id, ok := strings.CutSuffix(identity, adapter.TokensSuffix); ok && r.tokens {
		identity = id
	} else if r.tokens {
		return
	}
	after, err := r.TakeContext(ctx, key, 0) // as the key stands: a weight of 0 records nothing
	if err != nil {
		return // given back; only the page misses how the key stands
	}
	d := decision{
		At:       time.Now(),
		Route:    r.route,
		Key:      shownIdentity(identity),
		Decision: after,
		Refund:   &receipt,
		Given:    given,
		Settle:   r.settles,
	}
	if r.tokens {
		// Both budgets as they now stand, for the page.
		requests, err := r.TakeContext(ctx, strings.TrimSuffix(key, adapter.TokensSuffix)+adapter.RequestsSuffix, 0)
		if err == nil {
			d.Budgets = budgetsOf(middleware.Event{Budgets: []keyrate.Decision{requests, after}}, nil)
		}
	}
	r.publish(d)
}

// settleHint is what the start-up hints say of a route that reserves a
// cost.
func settleHint() string { return ", reserved and then settled: a request keeps what it used" }
