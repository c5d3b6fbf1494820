package redislimit

// WithHashTagFunc makes the hash tag of each key (see "Keys" in the
// package doc) from group(key) instead of from the whole key, so that keys
// of one group share a Redis Cluster slot: their state lives on one master,
// and TakeAll can decide them together in one script run (a script may
// only touch keys of one slot). group gets the key as TakeContext or
// TakeAll got it, whatever its length; its answer is hashed like a key
// (keyed by WithHashTagSecret when set), so it may hold any bytes, and ""
// keeps the key's own tag. keyrate-rls, for one, groups the keys of a
// request by its domain.
//
// The trade-off is the spread: a group's keys all load one master, and a
// hot group is a hot slot; keep groups as small as the keys that must be
// decided together. On a single server, which has no slots, it changes
// nothing but the keys' names: TakeAll takes keys of any tags there.
//
// A key's state is another Redis key under another tag: turning the option
// on, or changing what group returns for a key, starts the key over with
// an empty window, as a new prefix does; every limiter sharing budgets
// needs the same function. It must be safe for concurrent use, cheap (it
// runs on every decision, and on every key of a TakeAll), and give the
// same answer for a key every time. If it panics, the key keeps its own
// tag. Default: none, every key its own tag.
func WithHashTagFunc(group func(key string) string) Option {
	return func(cfg *config) { cfg.group, cfg.groupSet = group, true }
}

// tagOf returns the hash tag of key, bounded as id: made from its group
// (WithHashTagFunc), or from id.
func (l *Limiter) tagOf(key, id string) string {
	if l.group != nil {
		if g := l.groupName(key); g != "" {
			return l.tags.of(g)
		}
	}
	return l.tags.of(id)
}

// groupName returns WithHashTagFunc's answer for key, or "" when it panics.
func (l *Limiter) groupName(key string) (name string) {
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	return l.group(key)
}
