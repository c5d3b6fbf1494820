package redislimit

// WithHashTagFunc makes each key's hash tag from group(key) instead of the
// key, so that a group's keys share a Redis Cluster slot and TakeAll can
// decide them in one script run ("" keeps the key's own tag, as does a
// panic). The cost is the spread: a hot group is a hot slot. Turning it on,
// or moving a key to another group, starts the key over; every limiter that
// shares budgets needs the same function, cheap, safe for concurrent use
// and steady per key. Default: none ("Keys and Redis Cluster", README).
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
