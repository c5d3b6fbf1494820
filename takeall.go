package keyrate

import (
	"context"
	"math"
	"runtime"
	"slices"
	"strings"
)

// Hit is one key of a TakeAll request and the weight it counts against it.
type Hit struct {
	Key    string
	Weight int
}

// TakeAll decides a request that counts against several keys, each at its
// hit's weight, atomically: admitted only when every key has room, and then
// recorded against all; refused, it records nothing, and describes a key
// with room as it stands. A key given twice counts its weights' sum; a new
// key WithMaxKeys has no room for is refused with Overflow. It fails only
// with ctx's error, when ctx is done.
func (l *Limiter) TakeAll(ctx context.Context, hits []Hit) ([]Decision, bool, error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	ds := make([]Decision, len(hits))
	if len(hits) == 0 {
		return ds, true, nil
	}
	order, places := l.places(hits, ds)
	now := l.now()
	l.lockAll(places, now)
	allowed := decideAll(places, now)
	l.recordAll(places, allowed)
	for i, j := range order[1:] {
		if hits[j].Key == hits[order[i]].Key {
			ds[j] = ds[order[i]]
		}
	}
	return ds, allowed, nil
}

// place is one distinct key of a TakeAll, with its log once locked.
type place struct {
	key    string
	weight int // the sum of the key's weights; -1 if one is negative
	t      *tier
	g      *eventLog // nil: not tracked
	pin    *eventLog // the log this call created and pinned, if any
	d      *Decision // in the Decisions, at the key's first place
}

// admissible reports whether p's weight could ever fit its tier.
func (p *place) admissible() bool { return p.weight >= 1 && p.weight <= p.t.minLimit }

// places returns the indices of hits sorted by key, and one place per
// distinct key, in that order, deciding into ds at its first hit.
func (l *Limiter) places(hits []Hit, ds []Decision) ([]int, []place) {
	order := make([]int, len(hits))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(hits[a].Key, hits[b].Key) })
	places := make([]place, 0, len(hits))
	for _, i := range order {
		h := hits[i]
		if k := len(places) - 1; k >= 0 && places[k].key == h.Key {
			if p := &places[k]; p.weight >= 0 {
				p.weight = addWeights(p.weight, h.Weight)
			}
			continue
		}
		places = append(places, place{key: h.Key, weight: addWeights(0, h.Weight), t: l.tierFor(h.Key), d: &ds[i]})
	}
	return order, places
}

// lockAll looks every place's log up (or creates it) holding no lock, since
// creating one may make room by evicting others under their locks; then
// locks them all in the order of the keys. A log created here is pinned, so
// that creating the next cannot evict it, and counts as decided at now. A
// log that was already there may be evicted meanwhile; the next round then
// creates it, pinned, so the rounds end.
func (l *Limiter) lockAll(places []place, now int64) {
	for {
		for i := range places {
			p := &places[i]
			p.g = l.keys.load(p.key)
			if p.g == nil && p.admissible() {
				if g, fresh := l.keys.create(p.key); g != nil {
					if fresh {
						g.last = max(g.last, now)
						g.state |= pinned
						p.pin = g
						g.mu.Unlock()
					}
					p.g = g
				}
			}
		}
		gone := false
		for i := range places {
			if g := places[i].g; g != nil {
				g.mu.Lock()
				gone = gone || g.is(dead)
			}
		}
		if !gone {
			return
		}
		for i := range places { // one was evicted or Reset meanwhile: look again
			if g := places[i].g; g != nil {
				g.mu.Unlock()
			}
		}
		runtime.Gosched()
	}
}

// decideAll decides every place at now, recording nothing, and reports
// whether each had room.
func decideAll(places []place, now int64) bool {
	allowed := true
	for i := range places {
		p := &places[i]
		switch {
		case p.g != nil:
			if p.g.tier != p.t.id {
				p.g.retier(p.t)
			}
			p.g.decide(p.d, now, p.weight, p.t, false)
		case p.admissible():
			p.t.overflow(p.d, now) // at the bound, with no room to be made
		default:
			p.t.untracked(p.d, now, p.weight)
		}
		allowed = allowed && p.d.Allowed
	}
	return allowed
}

// recordAll records every place's weight when the request was allowed, at
// the instant just decided at, whose answer is the same; refused, a key
// with room stands as it is. It unpins and unlocks every log.
func (l *Limiter) recordAll(places []place, allowed bool) {
	for i := range places {
		p := &places[i]
		if p.pin != nil && p.pin == p.g {
			p.pin.state &^= pinned // else Reset took it out of the map: it is dead
		}
		if p.g == nil {
			continue
		}
		if allowed || p.d.Allowed {
			w := p.weight
			if !allowed {
				w = 0
			}
			*p.d = Decision{}
			p.g.decide(p.d, p.g.last, w, p.t, allowed)
			if allowed && w > 0 {
				l.receipt(&p.d.Receipt, p.g, w, p.t)
			}
		}
		p.g.mu.Unlock()
	}
}

// addWeights returns the weight of a key given twice, a+b, or -1 (never
// admissible) when b is negative or the sum passes any limit.
func addWeights(a, b int) int {
	if b < 0 || b > math.MaxInt32 || a+b > math.MaxInt32 {
		return -1
	}
	return a + b
}
