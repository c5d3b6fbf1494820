package keyrate

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allowLocked calls Allow(key) from another goroutine while this one holds
// key's lock, and reports whether it answered without waiting for the lock
// (its answer, then, is false). The deadline only decides how long a
// failing run takes to say so.
func allowLocked(t *testing.T, l *Limiter, key string) bool {
	t.Helper()
	g := l.keys.load(key)
	require.NotNil(t, g)
	g.mu.Lock()
	done := make(chan bool, 1)
	go func() { done <- l.Allow(key) }()
	select {
	case ok := <-done:
		g.mu.Unlock()
		require.False(t, ok, "an unlocked answer is a refusal")
		return true
	case <-time.After(10 * time.Second):
		g.mu.Unlock()
		<-done
		return false
	}
}

// TestRefusalTakesNoLock checks that Allow refuses a full key without its
// lock, from the moment the admission that filled it, and under each policy
// of a tier, until the oldest event leaves the window.
func TestRefusalTakesNoLock(t *testing.T) {
	l, c := newManual(t, 3, 10*time.Second)
	for range 3 {
		require.True(t, l.Allow("k"))
	}
	assert.True(t, allowLocked(t, l, "k"), "filled by its third admission")
	c.Advance(10*time.Second - time.Millisecond)
	assert.True(t, allowLocked(t, l, "k"), "a millisecond before the oldest leaves")
	c.Advance(time.Millisecond)
	assert.True(t, l.Allow("k"), "the oldest has left: the locked decision admits")

	several, c2 := newManual(t, 100, time.Hour)
	require.NoError(t, several.SetTier("", []Policy{{Name: "second", Limit: 2, Window: time.Second}, {Name: "hour", Limit: 100, Window: time.Hour}}))
	require.True(t, several.Allow("k"))
	require.True(t, several.Allow("k"))
	require.False(t, several.Allow("k"), "the second's limit")
	assert.True(t, allowLocked(t, several, "k"), "refused by the second's limit, published by the locked refusal")
	c2.Advance(time.Second)
	assert.True(t, several.Allow("k"))
}

// TestRefusalFollowsTheLog checks that what lets Allow refuse without the
// lock never outlives the events it summarises: a refund, Reset and a tier
// with a higher limit each let the next call in at once, and a shorter
// window counts from the caller's tier, not from the one that filled the
// key.
func TestRefusalFollowsTheLog(t *testing.T) {
	ctx := context.Background()
	l, c := newManual(t, 2, 10*time.Second)
	d := l.Take("k", 1)
	require.True(t, l.Allow("k"))
	require.False(t, l.Allow("k"))
	require.NoError(t, l.Refund(ctx, "k", &d))
	assert.True(t, l.Allow("k"), "the refund made room")
	assert.False(t, l.Allow("k"))

	l.Reset("k")
	assert.True(t, l.Allow("k"), "Reset forgets the events")
	require.True(t, l.Allow("k"))
	require.False(t, l.Allow("k"))

	require.NoError(t, l.SetTier("", []Policy{{Limit: 3, Window: 10 * time.Second}}))
	assert.True(t, l.Allow("k"), "a higher limit has room")
	assert.False(t, l.Allow("k"))

	c.Advance(5 * time.Second)
	require.NoError(t, l.SetTier("", []Policy{{Limit: 3, Window: 4 * time.Second}}))
	assert.True(t, l.Allow("k"), "a shorter window holds none of the events 5s old")

	// A clock stepped back after an event was settled out: the locked
	// decision is taken at the key's newest instant, where there is room,
	// and so the call must not be refused from what the key held before.
	m, c3 := newManual(t, 2, 10*time.Second)
	require.True(t, m.Allow("k"))
	c3.Advance(time.Second)
	require.True(t, m.Allow("k"))
	require.False(t, m.Allow("k"))
	c3.Advance(9 * time.Second)
	require.True(t, m.Peek("k").Allowed, "the first event has left")
	c3.Advance(-5 * time.Second)
	assert.True(t, m.Allow("k"), "decided at the newest instant, where one event is left")
}

// TestHammeredKeyKeepsItsPlace checks that under WithMaxKeys a key kept at
// its limit by calls that are all refused is decided recently enough that a
// flood of new keys does not evict it, events and all: its refusals take
// the lock and move it up the order.
func TestHammeredKeyKeepsItsPlace(t *testing.T) {
	l, c := newManual(t, 2, time.Hour, WithMaxKeys(32))
	require.True(t, l.Allow("hammered"))
	require.True(t, l.Allow("hammered"))
	for i := range 200 {
		c.Advance(time.Second)
		require.False(t, l.Allow("hammered"), "call %d", i)
		l.Allow(fmt.Sprintf("flood-%d", i))
	}
	assert.Equal(t, 0, l.Peek("hammered").Remaining, "its events stayed")
}

// TestRefusalMovesTheKeyToItsTier checks that a key refused under a tier
// whose window is longer than the one that last decided it moves to that
// tier, so that the janitor keeps the events that tier still counts: left
// in the shorter tier, it would be swept as idle and admit again.
func TestRefusalMovesTheKeyToItsTier(t *testing.T) {
	plan := map[string]string{}
	c := NewManualClock(t0)
	l, err := New(2, time.Minute, WithClock(c), WithJanitorInterval(0),
		WithTiers(func(key string) string { return plan[key] }, map[string][]Policy{"long": {{Limit: 2, Window: time.Hour}}}))
	require.NoError(t, err)
	defer l.Close()
	for _, key := range []string{"k", "j"} {
		require.True(t, l.Allow(key))
		require.True(t, l.Allow(key))
		require.False(t, l.Allow(key), "full under a minute: its refusal word is the minute tier's")
		plan[key] = "long"
	}
	c.Advance(30 * time.Second)
	require.False(t, l.Allow("k"), "the hour holds both events, read under the hour's tier")
	c.Advance(90 * time.Second)
	require.False(t, l.Allow("j"), "the hour holds both events, the minute none")
	assert.Equal(t, 0, l.sweep(l.now()), "the hour's tier keeps both keys")
	assert.False(t, l.Allow("k"))
	assert.False(t, l.Allow("j"))
}
