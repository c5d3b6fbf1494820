package adapter

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

// failingStore answers every AcquireSlot with err.
type failingStore struct{ err error }

func (s failingStore) AcquireSlot(context.Context, string, bool) (func(), int, error) {
	return nil, 0, s.err
}

func (failingStore) Tiered() bool { return false }

// told records what Hooks told, in order.
type told []string

func (t *told) hooks() Hooks {
	return Hooks{
		OnDecision: func(ev middleware.Event) { *t = append(*t, "decision "+ev.Decision.Policy) },
		OnLimited:  func(ev middleware.Event) { *t = append(*t, "limited "+ev.Decision.Policy) },
		OnError:    func(ev middleware.Event) { *t = append(*t, fmt.Sprintf("error shadow=%v", ev.Shadow)) },
		Observer:   observerFunc(func(ev middleware.Event) { *t = append(*t, "observe") }),
	}
}

type observerFunc func(middleware.Event)

func (f observerFunc) Observe(ev middleware.Event) { f(ev) }

func TestNewSlotGate(t *testing.T) {
	_, err := NewSlotGate(nil, 0, middleware.FailOpen, false, Hooks{})
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	conc, err := keyrate.NewConcurrency(1, nil, nil)
	require.NoError(t, err)
	_, err = NewSlotGate(conc, -time.Second, middleware.FailOpen, false, Hooks{})
	assert.ErrorIs(t, err, keyrate.ErrConfig)
}

// A request holds a slot while one is free, and is refused, reported as
// the in-flight policy's refusal, once the key holds its limit; in shadow
// mode that refusal is marked Shadow.
func TestSlotGateHold(t *testing.T) {
	for _, shadow := range []bool{false, true} {
		t.Run(fmt.Sprint("shadow=", shadow), func(t *testing.T) {
			conc, err := keyrate.NewConcurrency(1, nil, nil)
			require.NoError(t, err)
			var log told
			g, err := NewSlotGate(conc, 0, middleware.FailOpen, shadow, log.hooks())
			require.NoError(t, err)
			ctx := context.Background()

			ev := middleware.Event{Route: "search", Key: "search\x00alice", Context: ctx}
			held := g.Hold(ctx, &ev, "alice")
			require.NoError(t, held.Err)
			require.NotNil(t, held.Release)
			assert.False(t, held.Full)
			assert.Equal(t, keyrate.Policy{Name: "search-inflight", Limit: 1}, held.Policy)
			assert.Empty(t, log, "a held slot is reported by the rate decision, not here")

			ev = middleware.Event{Route: "search", Key: "search\x00alice", Context: ctx}
			full := g.Hold(ctx, &ev, "alice")
			assert.True(t, full.Full)
			assert.Nil(t, full.Release)
			assert.NoError(t, full.Err)
			assert.Equal(t, held.Policy, full.Policy)
			assert.Equal(t, slotRefusal("search", 1), ev.Decision)
			assert.Equal(t, shadow, ev.Shadow)
			assert.Equal(t, told{"decision search-inflight", "limited search-inflight", "observe"}, log)

			held.Release()
			ev = middleware.Event{Route: "search", Key: "search\x00alice", Context: ctx}
			again := g.Hold(ctx, &ev, "alice")
			require.NotNil(t, again.Release, "a released slot is free again")
			again.Release()
		})
	}
}

// A store failure goes on without a slot under middleware.FailOpen and in
// shadow mode, reported; middleware.FailClosed leaves it to the middleware,
// unreported. A request that cannot be placed, or whose client has gone, is
// left to the middleware in every mode.
func TestSlotGateFailures(t *testing.T) {
	down := fmt.Errorf("store down: %w", keyrate.ErrUnavailable)
	invalid := fmt.Errorf("no key: %w", keyrate.ErrInvalidKey)
	cases := []struct {
		name    string
		err     error
		failure middleware.FailureMode
		shadow  bool
		goOn    bool
		told    told
	}{
		{"down/FailOpen", down, middleware.FailOpen, false, true, told{"error shadow=false", "observe"}},
		{"down/FailClosed", down, middleware.FailClosed, false, false, nil},
		{"down/FailClosed/shadow", down, middleware.FailClosed, true, true, told{"error shadow=true", "observe"}},
		{"down/FailOpen/shadow", down, middleware.FailOpen, true, true, told{"error shadow=false", "observe"}},
		{"invalid/FailOpen/shadow", invalid, middleware.FailOpen, true, false, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var log told
			g, err := NewSlotGate(failingStore{tc.err}, 0, tc.failure, tc.shadow, log.hooks())
			require.NoError(t, err)
			ev := middleware.Event{Route: "r", Key: "r\x00k"}
			hold := g.Hold(context.Background(), &ev, "k")
			assert.ErrorIs(t, ev.Err, tc.err)
			assert.False(t, hold.Full)
			assert.Zero(t, hold.Policy, "the store gave no answer")
			if tc.goOn {
				assert.NoError(t, hold.Err)
				require.NotNil(t, hold.Release)
				hold.Release() // does nothing
			} else {
				assert.ErrorIs(t, hold.Err, tc.err)
				assert.Nil(t, hold.Release)
			}
			assert.Equal(t, tc.told, log)
		})
	}

	t.Run("gone", func(t *testing.T) {
		conc, err := keyrate.NewConcurrency(1, nil, nil)
		require.NoError(t, err)
		g, err := NewSlotGate(conc, 0, middleware.FailOpen, true, Hooks{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		ev := middleware.Event{Route: "r", Key: "r\x00k"}
		hold := g.Hold(ctx, &ev, "k")
		assert.ErrorIs(t, hold.Err, middleware.ErrClientGone)
		assert.True(t, errors.Is(ev.Err, context.Canceled))
		assert.Zero(t, ev.Duration, "no hook is set: nothing is timed")
	})
}

// Decided tells OnLimited only of a refusal; Failed tells OnError and the
// middleware.Observer; Timed reports whether anything is told.
func TestHooks(t *testing.T) {
	assert.False(t, Hooks{}.Timed())
	Hooks{}.Decided(middleware.Event{})
	Hooks{}.Failed(middleware.Event{})

	var log told
	h := log.hooks()
	assert.True(t, h.Timed())
	h.Decided(middleware.Event{Decision: keyrate.Decision{Allowed: true, Policy: "p"}})
	assert.Equal(t, told{"decision p", "observe"}, log)
	log = nil
	h.Failed(middleware.Event{Err: keyrate.ErrUnavailable})
	assert.Equal(t, told{"error shadow=false", "observe"}, log)
	assert.True(t, Hooks{Observer: h.Observer}.Timed())
}
