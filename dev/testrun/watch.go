package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// test names one test of one package, as go test -json does.
type test struct{ pkg, name string }

// watch follows which tests are running, from the go test -json events
// passed on, to name those that run for long. It is safe for concurrent
// use.
type watch struct {
	slow time.Duration

	mu      sync.Mutex
	running map[test]time.Time // when each running test started
}

func newWatch(slow time.Duration) *watch {
	return &watch{slow: slow, running: map[test]time.Time{}}
}

// event takes one line of go test -json, seen at now: a test that starts
// running is followed from now, one that ends is no longer. Any other line
// is no event and changes nothing.
func (w *watch) event(line []byte, now time.Time) {
	if len(line) == 0 || line[0] != '{' {
		return
	}
	var ev struct{ Action, Package, Test string }
	if json.Unmarshal(line, &ev) != nil || ev.Test == "" {
		return
	}
	t := test{ev.Package, ev.Test}
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Action {
	case "run":
		w.running[t] = now
	case "pass", "fail", "skip":
		delete(w.running, t)
	}
}

// due returns the tests that have run at least slow by now and have not
// been returned before, the longest running first; each is returned once.
func (w *watch) due(now time.Time) []test {
	w.mu.Lock()
	defer w.mu.Unlock()
	var long []test
	for t, began := range w.running {
		if !began.IsZero() && now.Sub(began) >= w.slow {
			long = append(long, t)
		}
	}
	slices.SortFunc(long, func(a, b test) int {
		return cmp.Or(w.running[a].Compare(w.running[b]), strings.Compare(a.pkg, b.pkg), strings.Compare(a.name, b.name))
	})
	for _, t := range long {
		w.running[t] = time.Time{} // told: still running, named no more
	}
	return long
}

// notice is the line that names t as still running after slow.
func notice(t test, slow time.Duration) []byte {
	return fmt.Appendf(nil, "!! still running after %v: %s (%s)", slow, t.name, t.pkg)
}

// every writes, each period until the returned stop is called, the
// notice of every test due by now. stop waits for the last check.
func (w *watch) every(period time.Duration, o *output, now func() time.Time) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				for _, t := range w.due(now()) {
					o.line(notice(t, w.slow))
				}
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
