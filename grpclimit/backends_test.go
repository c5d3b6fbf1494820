package grpclimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

type backendFunc func(ctx context.Context, key string, n int) (keyrate.Decision, error)

func (f backendFunc) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	return f(ctx, key, n)
}

// countingBackend counts the calls that reach the backend it wraps.
type countingBackend struct {
	keyrate.Backend
	calls atomic.Int64
}

func (c *countingBackend) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	c.calls.Add(1)
	return c.Backend.TakeContext(ctx, key, n)
}

// blockingBackend never answers until the test ends, whatever its context
// says: a store that hangs. It lists one policy, 5 a minute.
type blockingBackend struct{ release chan struct{} }

func newBlockingBackend(t *testing.T) *blockingBackend {
	b := &blockingBackend{release: make(chan struct{})}
	t.Cleanup(func() { close(b.release) })
	return b
}

func (b *blockingBackend) TakeContext(ctx context.Context, key string, n int) (keyrate.Decision, error) {
	<-b.release
	return keyrate.Decision{Allowed: true}, nil
}
func (b *blockingBackend) Policies() []keyrate.Policy {
	return []keyrate.Policy{{Limit: 5, Window: time.Minute}}
}

func (*blockingBackend) Tiered() bool { return false }

// recordingObserver writes down what it is told, one "route outcome; " each.
type recordingObserver struct {
	mu  sync.Mutex
	log strings.Builder
}

func (o *recordingObserver) Observe(ev middleware.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ev.Err != nil {
		fmt.Fprintf(&o.log, "%s error %v; ", ev.Route, ev.Err)
		return
	}
	outcome := "allowed"
	if !ev.Decision.Allowed {
		outcome = "limited"
	}
	if ev.Shadow {
		outcome = "shadow_limited"
	}
	if ev.Duration <= 0 {
		outcome += " untimed"
	}
	if ev.Decision.Fallback {
		outcome += " fallback"
	}
	fmt.Fprintf(&o.log, "%s %s; ", ev.Route, outcome)
}

func (o *recordingObserver) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.log.String()
}
