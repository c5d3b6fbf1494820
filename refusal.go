package keyrate

// A key at its limit is mostly asked again before anything leaves its
// window, and every such call is a refusal that records nothing. Allow
// answers those without the key's lock, from one word of its log that only
// atomics touch: the refusal word, a summary of the log that stays true
// until events leave it.
//
// The word says "the log holds at least c events, each at an instant at or
// after from". It is written under the log's mutex, by a decision that
// finds the key full (publishRefusal), with the key's last instant then
// (published), and cleared under it by anything that takes events out
// (forgetRefusal): settling them out of the window, a refund, Reset and
// eviction, and by any decision that moves the key's last instant on, so
// that while the word stands, the key's last instant is the one published
// with it. Adding events leaves it true. A call at now no earlier than that
// instant is decided at now, and must refuse n events under a policy of
// limit L and window w when c+n > L and from > now-w, for those c events
// are then all inside (now-w, now], the window the locked decision counts
// (windowAge keeps an entry exactly when its instant is after now-w). A
// call whose clock reads earlier takes the lock, to be decided at the last
// instant. The instant is stored before the word and loaded after it, so a
// reader that sees a word sees its instant or a later one (last only moves
// on), which only sends more calls to the lock. The instant is rounded up to
// refusalUnit, and its low bits hold the id of the key's tier, as moving the
// key to another tier clears the word: a call under a tier other than the
// key's takes the lock, which moves the key there, so that the janitor keeps
// its events for as long as the tier refusing it counts them. Neither part
// of the summary depends on the tier's policies, so it holds across SetTier:
// the caller's own tier supplies L and w.
//
// A refusal read off the word changes nothing, so Allow's locked refusals
// change nothing either but the key's tier (allow's lockFree): its instant
// and events stay as they were, and the two answer alike whichever a call
// takes.
// Under WithMaxKeys that makes room, every call takes the lock instead
// (Limiter.lockFree).
//
// The word packs c, capped at refusalCount (a lower bound stays true), and
// from rounded down to refusalUnit nanoseconds (an earlier bound stays true
// too): a call in the last refusalUnit before room opens takes the lock.
// The word and its instant cost the log 16 bytes (see eventLog).
const (
	refusalCountBits = 20
	refusalCount     = 1<<refusalCountBits - 1
	refusalUnitBits  = 16
	refusalUnit      = 1 << refusalUnitBits
	// refusalSpan bounds the instants a word can hold, about 36 years of
	// a limiter's life; a later one is never summarised.
	refusalSpan = 1 << (64 - refusalCountBits + refusalUnitBits)
)

// publishRefusal records that g holds at least c events at instants at or
// after from. Called with mu held, by a decision that found g full.
func (g *eventLog) publishRefusal(c int, from int64) {
	if c <= 0 || from < 0 || from >= refusalSpan {
		return
	}
	w := uint64(from)>>refusalUnitBits<<refusalCountBits | uint64(min(c, refusalCount))
	p := (g.last+refusalUnit-1)&^(refusalUnit-1) | int64(g.tier)
	if g.refusal.Load() != w || g.published.Load() != p {
		g.published.Store(p) // first: a reader that sees w sees this or a later one
		g.refusal.Store(w)
	}
}

// forgetRefusal clears the refusal word, as events leave g. Called with mu
// held.
func (g *eventLog) forgetRefusal() {
	if g.refusal.Load() != 0 {
		g.refusal.Store(0)
	}
}

// refuses reports whether the refusal word shows that n events cannot fit
// at now under some policy of t, which must be a sliding tier without
// calendar policies (tier.lockFree). It takes no lock: false only means
// that the locked decision must answer.
func (g *eventLog) refuses(now int64, n int, t *tier) bool {
	w := g.refusal.Load()
	p := g.published.Load()
	if w == 0 || uint16(p) != t.id || now < p&^(refusalUnit-1) {
		return false // another tier's, or the locked decision is taken at the key's last instant
	}
	c := int(w & refusalCount)
	from := int64(w>>refusalCountBits) << refusalUnitBits
	for i := range t.policies {
		if p := &t.policies[i]; c+n > p.Limit && from > now-int64(p.Window) {
			return true
		}
	}
	return false
}
