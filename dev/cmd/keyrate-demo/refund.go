package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
)

// refundable is a budget whose events can be given back: the in-process
// Limiter and the Redis one are both, and both bound their own calls and
// list their policies, which the middleware reads.
type refundable interface {
	keyrate.Backend
	keyrate.Bounded
	keyrate.PolicyLister
}

// partRefunder is a Redis budget that gives back part of a decision. The
// demo asks for it by this interface, not by redislimit's method, so that
// it builds against a redislimit with or without one.
type partRefunder interface {
	RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error
}

// refundReporter is a budget whose requests the middleware may give back,
// wholly (httplimit.WithRefund, or a reservation that was not used at all)
// or in part (settleReporter): each refund it makes is published like a
// decision, so that the log and the page show what the request no longer
// counts.
type refundReporter struct {
	refundable
	refund  func(ctx context.Context, key string, d *keyrate.Decision) error
	route   string
	settles bool // the route reserves a cost that its requests settle
	publish func(decision)
}

// settleReporter is a refundReporter whose budget also gives back part of
// a decision, the weight a request reserved and did not use
// (httplimit.ReportCost): the middleware settles a reservation through
// its RefundN only where the budget has one.
type settleReporter struct {
	refundReporter
	refundN func(ctx context.Context, key string, d *keyrate.Decision, n int) error
}

// newRefundReporter returns b, which must be an in-process or a Redis
// Limiter, as a refundReporter; as a settleReporter when b can give back
// part of a decision, as *keyrate.Limiter can. settles says that rt's
// requests reserve a cost and settle it.
func newRefundReporter(b keyrate.Backend, rt route, publish func(decision)) (keyrate.Backend, error) {
	r := refundReporter{route: rt.Name, settles: rt.Cost != nil, publish: publish}
	switch l := b.(type) {
	case *keyrate.Limiter:
		r.refundable = l
		r.refund = func(_ context.Context, key string, d *keyrate.Decision) error { return l.Refund(key, d) }
		return settleReporter{r, func(_ context.Context, key string, d *keyrate.Decision, n int) error { return l.RefundN(key, d, n) }}, nil
	case *redislimit.Limiter:
		r.refundable, r.refund = l, l.Refund
		if p, ok := any(l).(partRefunder); ok {
			return settleReporter{r, p.RefundN}, nil
		}
		return r, nil
	}
	return nil, fmt.Errorf("route %s: a budget of %T cannot give requests back", rt.Name, b)
}

// Refund gives back the events of the admitted decision *d for key, as the
// budget's own Refund does, and publishes that it did, with the key's
// budget as it then stands.
func (r refundReporter) Refund(ctx context.Context, key string, d *keyrate.Decision) error {
	receipt := d.Receipt // Refund consumes it
	if err := r.refund(ctx, key, d); err != nil {
		return err
	}
	r.published(ctx, key, receipt, receipt.N())
	return nil
}

// RefundN gives back n of the events of the admitted decision *d for key,
// as the budget's own RefundN does, and publishes that it did.
func (r settleReporter) RefundN(ctx context.Context, key string, d *keyrate.Decision, n int) error {
	receipt := d.Receipt // RefundN lowers it
	if err := r.refundN(ctx, key, d, n); err != nil {
		return err
	}
	r.published(ctx, key, receipt, n)
	return nil
}

// published publishes the refund of given of the events of the decision
// whose Receipt was receipt, with the key's budget as it now stands.
func (r refundReporter) published(ctx context.Context, key string, receipt keyrate.Receipt, given int) {
	// httplimit asks about route + "\x00" + the client's identity.
	identity := strings.TrimPrefix(key, r.route+"\x00")
	after, err := r.TakeContext(ctx, key, 0) // as the key stands: a weight of 0 records nothing
	if err != nil {
		return // given back; only the page misses how the key stands
	}
	r.publish(decision{
		At:       time.Now(),
		Route:    r.route,
		Key:      shownIdentity(identity),
		Decision: after,
		Refund:   &receipt,
		Given:    given,
		Settle:   r.settles,
	})
}

// redisSettles reports whether the Redis budget can give back part of a
// decision, so that a request that reserved a cost keeps only what it
// used there too.
func redisSettles() bool {
	_, ok := any((*redislimit.Limiter)(nil)).(partRefunder)
	return ok
}

// settles reports whether the budgets cfg makes settle a reserved cost:
// in process always, in Redis when redisSettles.
func settles(cfg config) bool { return cfg.Redis == nil || redisSettles() }

// settleHint is what the start-up hints say of a route that reserves a
// cost.
func settleHint(cfg config) string {
	if !settles(cfg) {
		return ", reserved and kept whole (this build's Redis budget cannot give part back)"
	}
	return ", reserved and then settled: a request keeps what it used"
}
