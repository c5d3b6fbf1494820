package main

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
)

// decide fills in the decisions of the items that count, for a request of
// domain, and reports whether the request is refused (before SHADOW_MODE,
// which only changes the answer); label is the domain as metrics and logs
// name it.
//
// Each descriptor counts at its own weight, and one store call decides
// them all, atomically: the common case is that one call. A request that
// a descriptor of weight 0 or a limit of 0 may refuse is checked whole
// first (checkFirst); one let through with descriptors over their limits
// is recorded against those with room (record); with the Redis deny
// cache, the descriptors a cached refusal kept from Redis are then
// described (describe).
func (s *service) decide(ctx context.Context, domain, label string, items []item) (bool, error) {
	live, check := liveItems(items)
	if len(live) == 0 {
		refused := s.refuses(items)
		s.observe(label, items, 0, false, refused)
		return refused, nil
	}
	start := time.Now()
	if check {
		refused, counted, err := s.checkFirst(ctx, domain, items, live)
		if err != nil {
			return false, s.failed(ctx, label, err, start)
		}
		if refused {
			s.observe(label, items, time.Since(start), true, true)
			return true, nil
		}
		live = counted
	}
	asked := live
	refused, err := s.record(ctx, domain, items, live)
	if err != nil {
		return false, s.failed(ctx, label, err, start)
	}
	s.describe(ctx, domain, items, asked)
	s.observe(label, items, time.Since(start), true, refused)
	return refused, nil
}

// liveItems returns the items the store decides (those that count, less
// the limits of 0, which it marks over), and whether the request must be
// checked before anything is recorded: an enforced descriptor of weight 0
// (checked, not counted) or of a limit of 0 may refuse it, and then a
// refusal records nothing anywhere.
func liveItems(items []item) (live []int, check bool) {
	for i := range items {
		it := &items[i]
		if !it.counts() {
			continue
		}
		if it.rule.blocked {
			it.over = true
			check = check || !it.rule.shadow
			continue
		}
		live = append(live, i)
		check = check || it.weight == 0 && !it.rule.shadow
	}
	return live, check
}

// checkFirst checks the live items whole, recording nothing, and reports
// whether the request is refused; if not, counted are the live items to
// record, those of a weight above 0.
func (s *service) checkFirst(ctx context.Context, domain string, items []item, live []int) (refused bool, counted []int, err error) {
	if _, err := s.take(ctx, domain, items, live, true); err != nil {
		return false, nil, err
	}
	for _, i := range live {
		it := &items[i]
		it.over = it.d.Remaining < max(it.weight, 1)
	}
	if s.refuses(items) {
		return true, nil, nil
	}
	counted = live[:0:0]
	for _, i := range live {
		if items[i].weight > 0 {
			counted = append(counted, i)
		}
	}
	return false, counted, nil
}

// record records the request against the live items in one atomic call,
// and reports whether it is refused. A request that passes although some
// are over their limits (a descriptor in shadow mode; in quota mode, some
// but not all) is let through and recorded against the items that have
// room and are not in shadow mode, with a further call each time a race
// makes one of those refuse too, each call itself atomic.
func (s *service) record(ctx context.Context, domain string, items []item, live []int) (refused bool, err error) {
	for len(live) > 0 {
		ok, err := s.take(ctx, domain, items, live, false)
		if err != nil {
			return false, err
		}
		if ok {
			for _, i := range live {
				items[i].over, items[i].recorded = false, true
			}
			return false, nil
		}
		for _, i := range live {
			items[i].over = !items[i].d.Allowed
		}
		if s.refuses(items) {
			return true, nil
		}
		// Let through: record it against what has room and is enforced.
		// Each round leaves out at least the item that refused the last.
		next := live[:0:0]
		for _, i := range live {
			if it := &items[i]; !it.over && !it.rule.shadow {
				next = append(next, i)
			}
		}
		live = next
	}
	return false, nil
}

// describe checks in the store, recording nothing, the asked items that
// were not recorded and have no policies to show (a cached refusal of the
// Redis deny cache kept them from Redis), so that their statuses tell how
// they stand. It is only to describe them: the request is decided, and may
// have been recorded, so an error here leaves them undescribed.
func (s *service) describe(ctx context.Context, domain string, items []item, asked []int) {
	var unasked []int
	for _, i := range asked {
		if it := &items[i]; !it.recorded && len(it.d.Policies()) == 0 {
			unasked = append(unasked, i)
		}
	}
	if len(unasked) == 0 {
		return
	}
	if _, err := s.take(ctx, domain, items, unasked, true); err != nil {
		return
	}
	for _, i := range unasked {
		it := &items[i]
		it.over = it.d.Remaining < max(it.weight, 1)
	}
}

// refuses applies the rule of the overall code to the items' over flags:
// a request is refused when a descriptor in neither shadow nor quota mode
// is over its limit, or when it has descriptors in quota mode and every
// one of them is over, as envoyproxy/ratelimit decides it (a descriptor
// in both shadow and quota mode counts as a quota descriptor that passes).
func (s *service) refuses(items []item) bool {
	quotas, quotasOver := 0, 0
	for i := range items {
		it := &items[i]
		if !it.counts() {
			continue
		}
		switch {
		case it.rule.quota || s.opts.quota:
			quotas++
			if it.over && !it.rule.shadow {
				quotasOver++
			}
		case it.rule.shadow:
		case it.over:
			return true
		}
	}
	return quotas > 0 && quotas == quotasOver
}

// take asks the store about the items at idx, each at its weight, or at 0
// when check is set (recording nothing), and sets their decisions. It
// reports whether the store admitted the request.
func (s *service) take(ctx context.Context, domain string, items []item, idx []int, check bool) (bool, error) {
	hits := make([]keyrate.Hit, len(idx))
	for j, i := range idx {
		hits[j] = keyrate.Hit{Key: items[i].key}
		if !check {
			hits[j].Weight = items[i].weight
		}
	}
	ds, ok, err := s.store.TakeAll(ctx, domain, hits)
	if err != nil {
		return false, err
	}
	for j, i := range idx {
		items[i].d = ds[j]
	}
	return ok, nil
}

// failed answers a request the store could not decide: with the status of
// ctx, the request's, when it ended (the client gave up), else
// UNAVAILABLE, a store past its time budget included.
func (s *service) failed(ctx context.Context, domain string, err error, start time.Time) error {
	s.metrics.storeError(domain, err, time.Since(start))
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rate limit store: %v", err)
}
