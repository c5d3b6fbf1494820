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
// says: a store that hangs. It reports a quota of 5 a minute.
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
func (b *blockingBackend) Limit() int            { return 5 }
func (b *blockingBackend) Window() time.Duration { return time.Minute }

// recordingObserver writes down what it is told, one "route outcome; " each.
type recordingObserver struct {
	mu  sync.Mutex
	log strings.Builder
}

func (o *recordingObserver) ObserveDecision(route string, d keyrate.Decision, shadow bool, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	outcome := "allowed"
	if !d.Allowed {
		outcome = "limited"
	}
	if shadow {
		outcome = "shadow_limited"
	}
	if took <= 0 {
		outcome += " untimed"
	}
	if d.Fallback {
		outcome += " fallback"
	}
	fmt.Fprintf(&o.log, "%s %s; ", route, outcome)
}

func (o *recordingObserver) ObserveError(route string, err error, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(&o.log, "%s error %v; ", route, err)
}

func (o *recordingObserver) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.log.String()
}
