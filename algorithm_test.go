package keyrate

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFixedWindowBoundaryBurst is the burst the sliding log exists to stop:
// 10 per 10s, 10 calls at 00:09 and 10 at 00:11. A fixed window admits all
// 20, and each refusal waits only for its window's end.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	l, c := newManual(t, 10, 10*time.Second, WithAlgorithm(FixedWindow))
	c.Set(t0.Add(9 * time.Second))
	for i := range 10 {
		d := l.Take("k", 1)
		require.True(t, d.Allowed, "00:09 call %d", i)
		assert.Equal(t, 9-i, d.Remaining)
		assert.Equal(t, time.Second, d.ResetAfter, "the window ends at 00:10")
		assert.Equal(t, time.Second, d.RefillAfter, "and all its quota comes back then")
	}
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	c.Set(t0.Add(11 * time.Second))
	for i := range 10 {
		require.True(t, l.Allow("k"), "00:11 call %d: a new window", i)
	}
	d = l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, 9*time.Second, d.RetryAfter, "until 00:20")
	assert.Zero(t, l.Take("k", 11).RetryAfter, "11 never fits 10")
}

// TestGCRABurstThenRate checks the token bucket: 10 per 10s is a burst of
// 10, then one a second.
func TestGCRABurstThenRate(t *testing.T) {
	l, c := newManual(t, 10, 10*time.Second, WithAlgorithm(GCRA))
	for i := range 10 {
		d := l.Take("k", 1)
		require.True(t, d.Allowed, "burst call %d", i)
		assert.Equal(t, 9-i, d.Remaining)
		assert.Equal(t, time.Duration(i+1)*time.Second, d.ResetAfter, "full again after a second per token spent")
		assert.Equal(t, time.Second, d.RefillAfter)
	}
	d := l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, 0, d.Remaining)
	for s := 1; s <= 5; s++ {
		c.Advance(time.Second)
		require.True(t, l.Allow("k"), "one a second: %ds", s)
		require.False(t, l.Allow("k"), "and no more: %ds", s)
	}
	c.Advance(500 * time.Millisecond)
	d = l.Take("k", 1)
	require.False(t, d.Allowed)
	assert.Equal(t, 500*time.Millisecond, d.RetryAfter)
	c.Advance(time.Hour)
	d = l.Take("k", 3)
	require.True(t, d.Allowed, "refilled")
	assert.Equal(t, 7, d.Remaining)
}

// TestAlgorithmsUnderPolicies decides 2 per second and 5 per 10 seconds
// together under each algorithm: a request is admitted only when both have
// room, and a refusal by one records nothing against the other.
func TestAlgorithmsUnderPolicies(t *testing.T) {
	policies := []Policy{{Name: "second", Limit: 2, Window: time.Second}, {Name: "ten", Limit: 5, Window: 10 * time.Second}, {Name: "minute", Limit: 50, Window: time.Minute}}
	// 10 seconds of 4 calls a second. The ten-second policy binds: a fixed
	// window admits its 5 (t0 starts a window); a bucket of 5 refilled one
	// every 2 seconds admits 6 in the first 2 seconds, limited to 2 a second
	// by the other policy, and one at 4, 6 and 8 seconds: 9.
	for a, want := range map[Algorithm]int{FixedWindow: 5, GCRA: 9} {
		t.Run(a.String(), func(t *testing.T) {
			c := NewManualClock(t0)
			l, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0), WithAlgorithm(a))
			require.NoError(t, err)
			defer l.Close()
			admitted := 0
			for range 40 {
				if l.Allow("k") {
					admitted++
				}
				c.Advance(250 * time.Millisecond)
			}
			assert.Equal(t, want, admitted)
			d := l.Take("k", 1)
			assert.Len(t, d.Policies(), 3)
			c.Advance(time.Minute)
			assert.True(t, l.Allow("k"))
		})
	}
}

// TestAlgorithmsForgetIdleKeys checks that the janitor evicts a key once
// its counters have run out, and only then.
func TestAlgorithmsForgetIdleKeys(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			l, c := newManual(t, 10, 10*time.Second, WithAlgorithm(a))
			c.Set(t0.Add(5 * time.Second))
			l.AllowN("k", 4)
			assert.Zero(t, l.sweep(l.now()))
			c.Advance(3 * time.Second)
			assert.Zero(t, l.sweep(l.now()), "the window has not ended, nor the bucket refilled")
			c.Advance(3 * time.Second)
			assert.Equal(t, 1, l.sweep(l.now()))
			assert.Zero(t, l.Len())
		})
	}
}

// TestAlgorithmConfig checks WithAlgorithm's errors.
func TestAlgorithmConfig(t *testing.T) {
	_, err := New(1, time.Second, WithAlgorithm(GCRA+1))
	assert.ErrorIs(t, err, ErrConfig)
	_, err = New(1, time.Second, WithAlgorithm(FixedWindow), WithResolution(time.Millisecond))
	assert.ErrorIs(t, err, ErrConfig)
	assert.Equal(t, "GCRA", GCRA.String())
}

// TestMemoryPerKeyAlgorithms fills keys to their limit under each O(1)
// algorithm: a key costs what a sliding log's key with one event does,
// whatever its limit.
func TestMemoryPerKeyAlgorithms(t *testing.T) {
	if testing.Short() || raceDetector {
		t.Skip("fills 100k keys, slow under -short and the race detector")
	}
	for _, a := range []Algorithm{FixedWindow, GCRA} {
		l, err := New(1000, time.Hour, WithJanitorInterval(0), WithAlgorithm(a))
		require.NoError(t, err)
		const keys = 100_000
		names := make([]string, keys)
		before := heapInUse()
		for i := range names {
			names[i] = fmt.Sprintf("client-%08d", i)
			require.True(t, l.AllowN(names[i], 1000))
			require.False(t, l.Allow(names[i]))
		}
		perKey := float64(heapInUse()-before) / keys
		t.Logf("%v: %.1f bytes per key, full at 1,000 per hour", a, perKey)
		assert.Less(t, perKey, 128.0, "%v", a)
		l.Close()
	}
}
