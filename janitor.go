package keyrate

import "time"

// runJanitor sweeps every interval until Close.
func (l *Limiter) runJanitor(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			l.sweep(l.now())
		case <-l.done:
			return
		}
	}
}

// sweep evicts every key with no event left in the window at now, shrinks
// the rings of the rest and then the map's table, and returns how many keys
// it evicted. It locks one key (and, to delete it, one bucket chain of the
// map) at a time, so callers for other keys never wait on it. Evicting only
// idle keys keeps it invisible: a request for an evicted key gets the answer
// it would have got anyway.
func (l *Limiter) sweep(now int64) int {
	evicted := 0
	l.keys.each(func(g *eventLog) {
		g.mu.Lock()
		idle := g.buf != nil && g.idle(now, l.window)
		g.mu.Unlock()
		if !idle {
			return
		}
		if l.keys.removeIf(g.key, g, func(g *eventLog) bool {
			if !g.idle(now, l.window) {
				return false // an event arrived since the look above
			}
			l.raiseFloor(max(now, g.last)) // before the key disappears
			return true
		}) {
			evicted++
		}
	})
	l.keys.shrink()
	return evicted
}

// raiseFloor moves the floor for new logs up to t, never down.
func (l *Limiter) raiseFloor(t int64) {
	for {
		f := l.floor.Load()
		if t <= f || l.floor.CompareAndSwap(f, t) {
			return
		}
	}
}
