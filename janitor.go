package keyrate

import "time"

// startJanitor starts the goroutine that sweeps every interval until Close.
func (l *Limiter) startJanitor(interval time.Duration) {
	l.background.Go(func() {
		every(interval, l.done, func() { l.sweep(l.now()) })
	})
}

// sweep evicts every key with no event left in its longest window at now
// (that of the tier that last decided it), shrinks
// the rings of the rest, and returns how many keys it evicted. It locks one
// key (and, to delete it, one bucket of the map) at a time, so callers for
// other keys never wait on it. Evicting only idle keys keeps it invisible:
// a request for an evicted key gets the answer it would have got anyway.
func (l *Limiter) sweep(now int64) int {
	return l.keys.evictIdle(now, l.retention)
}
