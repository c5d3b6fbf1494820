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

// TakeAll decides a request that counts against several keys, each at its
// hit's weight and under its own tier (the tier function sees the key, not
// the context's identity), as keyrate.Limiter.TakeAll does: admitted only
// when every key has room, then recorded against all of them in one script
// run at one instant of the server's clock; refused, it records nothing,
// and a key with room is described as it stands. A key given twice counts
// the sum of its weights under one Decision. Each key shares TakeContext's
// budget for it. On a Redis Cluster the keys must share a hash tag
// (WithHashTagFunc), or it returns an error wrapping keyrate.ErrConfig.
// The deny cache, breaker and fallback apply as for TakeContext, whose
// errors it returns, for the first key at fault ("Several keys", README).
func (l *Limiter) TakeAll(ctx context.Context, hits []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	ds := make([]keyrate.Decision, len(hits))
	if len(hits) == 0 {
		return ds, true, nil
	}
	keys := make([]string, len(hits))
	for i, h := range hits {
		keys[i] = h.Key
	}
	fail := func(err error) ([]keyrate.Decision, bool, error) {
		l.failAll(ds, keys)
		return ds, false, err
	}
	if l.closed.Load() {
		return fail(errClosed("take all"))
	}
	if h := hits[0]; l.leases != nil && len(hits) == 1 && h.Key != "" && h.Weight > 0 {
		// One key: from its lease. Several decide in Redis, each key
		// looking back window + d as every decision does.
		tr := l.tierFor(ctx, h.Key)
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		d, err := l.takeLeased(ctx, h.Key, clientkey.Bound(h.Key), tr, h.Weight)
		ds[0] = d
		return ds, d.Allowed && err == nil, err
	}
	places, at, err := l.takePlaces(hits)
	if err == nil {
		err = ctx.Err()
	}
	if err == nil {
		err = l.checkOneSlot(places)
	}
	if err != nil {
		return fail(err)
	}
	ok, err := l.decideAll(ctx, places)
	if err != nil {
		return fail(err)
	}
	for i := range ds {
		ds[i] = places[at[i]].d
	}
	return ds, ok, nil
}

// takePlaces returns one place per distinct key of hits, in the order they
// first appear, each with its summed weight, bounded key, tag and tier, and
// at[i], the place of hits[i]; or an error wrapping keyrate.ErrInvalidKey
// for an empty key.
func (l *Limiter) takePlaces(hits []keyrate.Hit) (places []takePlace, at []int, err error) {
	places = make([]takePlace, 0, len(hits))
	at = make([]int, len(hits))
	seen := make(map[string]int, len(hits))
	for i, h := range hits {
		key, n := h.Key, h.Weight
		if p, ok := seen[key]; ok {
			at[i] = p
			places[p].w = addWeight(places[p].w, n)
			continue
		}
		if key == "" {
			return nil, nil, fmt.Errorf("redislimit: take all: %w: key %d is empty", keyrate.ErrInvalidKey, i)
		}
		id := clientkey.Bound(key)
		seen[key], at[i] = len(places), len(places)
		places = append(places, takePlace{key: key, id: id, tag: l.tagOf(key, id), t: l.keyTier(key), w: addWeight(0, n)})
	}
	return places, at, nil
}

// checkOneSlot returns an error wrapping keyrate.ErrConfig when places are
// under several hash tags on a client that may be a Cluster's, which runs
// a script on one slot only.
func (l *Limiter) checkOneSlot(places []takePlace) error {
	if _, single := l.client.(*redis.Client); single {
		return nil
	}
	for i := range places[1:] {
		if places[i+1].tag != places[0].tag {
			return fmt.Errorf("redislimit: take all: %w: keys under %s and %s are in different hash tags, which a Redis Cluster cannot decide in one script; group them with WithHashTagFunc",
				keyrate.ErrConfig, keyRef(places[0].tag), keyRef(places[i+1].tag))
		}
	}
	return nil
}

// decideAll decides places all or nothing, setting each place's Decision,
// and reports whether the request was admitted: from the deny cache, in
// one script run, or, while Redis cannot answer, in the fallback.
func (l *Limiter) decideAll(ctx context.Context, places []takePlace) (bool, error) {
	sent := l.localNow()
	if l.deny != nil && l.denied(places, sent) {
		return false, nil
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
		return l.fallbackTakeAll(places), nil
	case err != nil:
		return false, err
	}
	ok, err := l.takeAllReply(places, a)
	if err != nil {
		return false, fmt.Errorf("redislimit: take all %s: %w", keyRef(places[0].tag), err)
	}
	for i := range places {
		p := &places[i]
		l.remember(p.id, p.t, p.w, sent, p.d, ok)
	}
	return ok, nil
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

// fallbackTakeAll decides places in the fallback, whose TakeAll has the
// same semantics, each under the tier already chosen for it, sets each
// place's Decision and reports whether the request was admitted.
func (l *Limiter) fallbackTakeAll(places []takePlace) bool {
	// One hit per place, at its summed weight: the same request as the
	// one given.
	hits := make([]keyrate.Hit, len(places))
	for i := range places {
		hits[i] = keyrate.Hit{Key: l.fallbackKey(places[i].t, places[i].id), Weight: places[i].w}
	}
	pds, ok, _ := l.fallback.lim.TakeAll(context.Background(), hits)
	for i := range places {
		places[i].d = pds[i]
		places[i].d.Fallback = true
	}
	return ok
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
