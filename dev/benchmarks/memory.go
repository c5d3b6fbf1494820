package benchmarks

import (
	"runtime"
	"time"
)

// heapBytes returns the live heap after two full collections (the second
// frees what finalizers of the first released).
func heapBytes() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// fill admits events events for each of keys fresh keys. Each key string is
// formatted here and referenced only by the limiter, so a limiter that keeps
// its keys is charged for them and one that keeps only a hash is not.
func fill(l Limiter, keys, events int) {
	for i := range keys {
		k := Key(i)
		for range events {
			l.Allow(k)
		}
	}
}

// BytesPerKey returns the heap the limiter holds per tracked key after
// admitting events events (at most 100) to each of keys fresh keys under the
// 100-per-minute budget, key strings included.
func BytesPerKey(p Peer, keys, events int) (float64, error) {
	l, err := p.New(Config{Limit: 100, Window: time.Minute})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	before := heapBytes()
	fill(l, keys, events)
	after := heapBytes()
	runtime.KeepAlive(l)
	return float64(after-before) / float64(keys), nil
}

// IdleSetup is the scaled-down configuration of the idle-memory measurement:
// a window and sweep interval short enough to watch every key go idle and be
// swept in real time.
const (
	IdleWindow = 200 * time.Millisecond
	IdleSweep  = 100 * time.Millisecond
	IdleWait   = 2 * time.Second
)

// BytesPerKeyAfterIdle admits one event for each of keys fresh keys under a
// budget of 100 per IdleWindow, lets every key go idle for IdleWait (many
// windows and sweeps), then calls Allow on two other keys one window apart
// (a limiter that sweeps only on its callers' path, like httprate, sweeps
// then) and returns the heap still held per original key.
//
// It runs in real time: the peers' sweepers read the system clock.
func BytesPerKeyAfterIdle(p Peer, keys int) (float64, error) {
	l, err := p.New(Config{Limit: 100, Window: IdleWindow, Sweep: IdleSweep})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	before := heapBytes()
	fill(l, keys, 1)
	deadline := time.Now().Add(IdleWait)
	if k, ok := l.(interface{ Len() int }); ok {
		// keyrate says when it is done; poll, with the same deadline.
		for k.Len() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	} else {
		time.Sleep(time.Until(deadline))
	}
	l.Allow("probe-a")
	time.Sleep(IdleWindow)
	l.Allow("probe-b")
	after := heapBytes()
	runtime.KeepAlive(l)
	return float64(after-before) / float64(keys), nil
}
