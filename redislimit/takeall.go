package redislimit

import (
	"context"
	"fmt"
	"math"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/clientkey"
	"github.com/redis/go-redis/v9"
)

// TakeAll decides a request that counts against several keys, each hit at
// its own weight and each key under its own tier (the tier function sees
// each key as given, not the context's identity): it is admitted only when
// every key has room for its weight, and then recorded against every key,
// in one script run, one round trip, at one instant of the Redis server's
// clock; the run and the round trip are shared with the concurrent calls
// of the Limiter (see TakeContext). A refusal by one key records nothing
// against the others. It
// returns each hit's Decision, in the order of hits, and whether the
// request was admitted. The semantics are the in-process
// keyrate.Limiter.TakeAll's.
//
// When the request is refused, a key that had room is described as it
// stands, the request not recorded, as TakeContext(ctx, key, 0) would
// describe it. A key given twice counts the sum of its weights, and both
// places get its one Decision. No hits at all admit the request. The rules
// for each weight are TakeContext's; a negative one refuses the request. An admitted call's Decisions
// carry Receipts, so each key's events can be refunded (Refund): a key
// given twice, once.
//
// Keys of any length and bytes are limited, each under its own Redis key,
// the same as TakeContext's for that key: the two share its budget. On a
// single server any keys can be decided together. A Redis Cluster runs a
// script on one slot only, so there the keys of one call must share a
// hash tag: give WithHashTagFunc a function that puts the keys decided
// together in one group (keyrate-rls groups a request's keys by its
// domain); TakeAll returns an error wrapping keyrate.ErrConfig, and asks
// nothing, for keys of several tags on any client but a *redis.Client.
//
// With the deny cache (WithDenyCache), a refusal it holds for any key, at
// the weight the call gives that key, refuses the call without a round
// trip: that key's Decision is the cached one, and the keys it did not ask
// Redis about have a Decision with Allowed set (nothing refused them),
// their tier's first Limit and no policies. The circuit breaker and the
// local fallback apply as for TakeContext: while Redis cannot answer, the
// fallback's TakeAll decides, every Decision with Fallback set.
//
// The errors are TakeContext's, for the first key at fault; with an
// error, every Decision has only its Limit set.
func (l *Limiter) TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	ds := make([]keyrate.Decision, len(hits))
	if len(hits) == 0 {
		return ds, true, nil
	}
	keys := make([]string, len(hits))
	for i, h := range hits {
		keys[i] = h.Key
	}
	if l.closed.Load() {
		l.failAll(ds, keys)
		return ds, false, errClosed("take all")
	}
	if h := hits[0]; l.leases != nil && len(hits) == 1 && h.Key != "" && h.Weight > 0 {
		// One key: from its lease. Several decide in Redis, each key
		// looking back window + d as every decision does.
		tr := l.tierFor(ctx, h.Key)
		if err := ctx.Err(); err != nil {
			l.failAll(ds, keys)
			return ds, false, err
		}
		d, err := l.takeLeased(ctx, h.Key, clientkey.Bound(h.Key), tr, h.Weight)
		ds[0] = d
		return ds, d.Allowed && err == nil, err
	}
	// One place per distinct key, in the order they first appear; at[i] is
	// the place of hits[i].
	places := make([]takePlace, 0, len(hits))
	at := make([]int, len(hits))
	seen := make(map[string]int, len(hits))
	for i, h := range hits {
		key, n := h.Key, h.Weight
		if p, ok := seen[key]; ok {
			at[i] = p
			places[p].w = addWeight(places[p].w, n)
			continue
		}
		if key == "" {
			l.failAll(ds, keys)
			return ds, false, fmt.Errorf("redislimit: take all: %w: key %d is empty", ErrInvalidKey, i)
		}
		id := clientkey.Bound(key)
		seen[key], at[i] = len(places), len(places)
		places = append(places, takePlace{key: key, id: id, tag: l.tagOf(key, id), t: l.keyTier(key), w: addWeight(0, n)})
	}
	fail := func(err error) ([]keyrate.Decision, bool, error) {
		l.failAll(ds, keys)
		return ds, false, err
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if _, single := l.client.(*redis.Client); !single {
		for i := range places[1:] {
			if places[i+1].tag != places[0].tag {
				return fail(fmt.Errorf("redislimit: take all: %w: keys under %s and %s are in different hash tags, which a Redis Cluster cannot decide in one script; group them with WithHashTagFunc",
					keyrate.ErrConfig, keyRef(places[0].tag), keyRef(places[i+1].tag)))
			}
		}
	}
	sent := l.localNow()
	if l.deny != nil && l.denied(places, sent) {
		for i := range keys {
			ds[i] = places[at[i]].d
		}
		return ds, false, nil
	}

	r := &request{keys: make([]string, len(places)), weights: make([]int, len(places)), tiers: make([]*tier, len(places)),
		tag: places[0].tag, instant: sent / 1000}
	for i := range places {
		p := &places[i]
		r.keys[i], r.weights[i], r.tiers[i] = l.storeKey(p.id, p.tag), p.w, p.t
	}
	a, fallback, err := l.ask(ctx, r, func(i int) string {
		if i < 0 || i >= len(places) {
			i = 0
		}
		return "take all " + keyRef(places[i].tag)
	})
	switch {
	case fallback:
		fds, ok := l.fallbackTakeAll(places, at)
		return fds, ok, nil
	case err != nil:
		return fail(err)
	}
	ok, err := l.takeAllReply(places, a)
	if err != nil {
		return fail(fmt.Errorf("redislimit: take all %s: %w", keyRef(places[0].tag), err))
	}
	for i := range places {
		p := &places[i]
		l.remember(p.id, p.t, p.w, sent, p.d, ok)
	}
	for i := range keys {
		ds[i] = places[at[i]].d
	}
	return ds, ok, nil
}

// takePlace is one distinct key of a TakeAll: as given, bounded, its tag,
// its tier, its weight (n times the times it was given) and, once decided,
// its Decision.
type takePlace struct {
	key, id, tag string
	t            *tier
	w            int
	d            keyrate.Decision
}

// addWeight returns w + n, the weight of a key given again at n, held
// within what the scripts count in: -1 once any of its weights is negative,
// and at most one past the largest limit, refused whatever its size.
func addWeight(w, n int) int {
	if w < 0 || n < 0 {
		return -1
	}
	return min(w+n, math.MaxInt32+1)
}

// keyTier returns the tier that decides key in a TakeAll: the tier
// function's answer for the key itself.
func (l *Limiter) keyTier(key string) *tier {
	tab := l.tiers.Load()
	if l.tierOf == nil {
		return tab.def
	}
	if t, ok := tab.named[backend.TierOf(context.Background(), l.tierOf, key)]; ok {
		return t
	}
	return tab.def
}

// failAll sets each key's Decision to the one returned with an error: the
// first policy's Limit of its tier.
func (l *Limiter) failAll(ds []keyrate.Decision, keys []string) {
	for i, key := range keys {
		ds[i] = l.keyTier(key).failed()
	}
}

// denied reports whether the deny cache holds a refusal, at the local
// instant now, for some place at its weight; if so it sets every place's
// Decision: the cached refusals, and for the others a Decision that says
// nothing refused them and nothing more.
func (l *Limiter) denied(places []takePlace, now int64) bool {
	refused := false
	for i := range places {
		p := &places[i]
		if d, ok := l.deny.refuse(p.id, p.t, p.w, now); ok {
			p.d, refused = d, true
		}
	}
	if !refused {
		return false
	}
	for i := range places {
		if p := &places[i]; len(p.d.Policies()) == 0 {
			p.d = keyrate.Decision{Allowed: true, Limit: p.t.policies[0].Limit}
		}
	}
	return true
}

// fallbackTakeAll decides a TakeAll in the fallback, whose TakeAll has the
// same semantics: each key under the tier the Limiter names for it.
func (l *Limiter) fallbackTakeAll(places []takePlace, at []int) ([]keyrate.Decision, bool) {
	// One hit per place, at its summed weight, and each hit's Decision is
	// its place's: the same request as the one given.
	hits := make([]keyrate.Hit, len(places))
	for i := range places {
		hits[i] = keyrate.Hit{Key: l.fallbackKey(context.Background(), places[i].key, places[i].id), Weight: places[i].w}
	}
	pds, ok, _ := l.fallback.lim.TakeAll(context.Background(), hits)
	ds := make([]keyrate.Decision, len(at))
	for i, p := range at {
		ds[i] = pds[p]
	}
	for i := range ds {
		ds[i].Fallback = true
	}
	return ds, ok
}

// takeAllReply sets each place's Decision from the script's answer a,
// and returns whether the request was admitted. A place described as it
// stands (it had room in a refused request) was decided at a weight of 0;
// the others at their weight.
func (l *Limiter) takeAllReply(places []takePlace, a answer) (bool, error) {
	if len(a.replies) != len(places) {
		return false, fmt.Errorf("script returned %d keys' replies, want %d", len(a.replies), len(places))
	}
	ok := a.admitted
	for i := range places {
		p := &places[i]
		w := p.w
		if !ok && fitsAsItStands(p, a.replies[i]) {
			w = 0
		}
		d, err := p.t.decision(w, ok || w == 0, a.replies[i])
		if err != nil {
			return false, fmt.Errorf("key %d: %w", i+1, err)
		}
		p.d = d
	}
	return ok, nil
}

// fitsAsItStands reports whether the script described place p of a
// refused request as it stands (at weight 0): p's weight fit every policy,
// as the reply's remaining say. Otherwise it was decided, and refused, at
// its weight.
func fitsAsItStands(p *takePlace, v keyReply) bool {
	if p.w < 0 {
		return false
	}
	for i, q := range p.t.policies {
		if p.w > q.Limit || v.policy(i)[0] < int64(p.w) {
			return false
		}
	}
	return true
}
