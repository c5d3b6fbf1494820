package keyrate

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
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
	policies := []Policy{{"second", 2, time.Second}, {"ten", 5, 10 * time.Second}, {"minute", 50, time.Minute}}
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

// TestAlgorithmsMatchModels drives each O(1) algorithm and a naive model of
// it (a counter per calendar window; a bucket of tokens refilled one per
// window/limit) with one random sequence of weights and clock moves, some
// backwards, over one to three policies, and compares each answer and the
// numbers behind it.
func TestAlgorithmsMatchModels(t *testing.T) {
	for _, a := range []Algorithm{FixedWindow, GCRA} {
		t.Run(a.String(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				policies := drawPolicies(t, "policies")
				c := NewManualClock(t0)
				l, err := NewPolicies(policies, WithClock(c), WithJanitorInterval(0), WithAlgorithm(a))
				require.NoError(t, err)
				defer l.Close()
				m := newCountModel(a, policies)
				for i := range rapid.IntRange(1, 200).Draw(t, "steps") {
					c.Advance(time.Duration(rapid.IntRange(-2, 6).Draw(t, "step")) * time.Second / 4)
					now := max(int64(c.Now().Sub(t0)), m.last)
					n := rapid.IntRange(0, 4).Draw(t, "n")
					want := m.decide(now, n)
					got := l.Take("k", n)
					require.Equal(t, want.Allowed, got.Allowed, "step %d: Take(%d) at %v", i, n, time.Duration(now))
					for j, p := range got.Policies() {
						w := want.parts[j]
						require.Equal(t, w, p, "step %d: Take(%d) at %v, policy %s", i, n, time.Duration(now), p.Name)
					}
				}
			})
		})
	}
}

// countModel is the naive model of FixedWindow and GCRA for one key.
type countModel struct {
	algorithm Algorithm
	policies  []Policy
	last      int64
	tracked   bool
	count     []int   // FixedWindow: the events of the window last decided in
	tat       []int64 // GCRA: when each bucket is full again, in nanoseconds
}

func newCountModel(a Algorithm, policies []Policy) *countModel {
	return &countModel{algorithm: a, policies: policies, count: make([]int, len(policies)), tat: make([]int64, len(policies))}
}

// every is policy i's nanoseconds between refills: window/limit rounded up
// to a tick of the tier's scale.
func (m *countModel) every(i int) int64 {
	var longest time.Duration
	for _, p := range m.policies {
		longest = max(longest, p.Window)
	}
	unit := newScale(int64(longest), 0).unit
	p := m.policies[i]
	return ceilDiv(ceilDiv(int64(p.Window), int64(p.Limit)), unit) * unit
}

func (m *countModel) decide(now int64, n int) Decision {
	minLimit := m.policies[0].Limit
	for _, p := range m.policies {
		minLimit = min(minLimit, p.Limit)
	}
	if !m.tracked && (n < 1 || n > minLimit) {
		now = max(now, 0) // an untracked key is decided on an empty state
	} else {
		m.tracked = true
	}
	prev := m.last
	if m.tracked {
		m.last = now
	}
	var d Decision
	d.nparts = len(m.policies)
	allowed := true
	for i, p := range m.policies {
		part := &d.parts[i]
		part.Policy = p
		w := int64(p.Window)
		switch m.algorithm {
		case FixedWindow:
			// Windows are whole multiples of w since the epoch.
			wall := t0.UnixNano()
			if floorDiv(wall+now, w) != floorDiv(wall+prev, w) {
				m.count[i] = 0
			}
			end := time.Duration((floorDiv(wall+now, w)+1)*w - wall - now)
			part.Remaining = p.Limit - m.count[i]
			part.Allowed = n == 0 || n >= 0 && n <= p.Limit && m.count[i]+n <= p.Limit
			if !part.Allowed && n > 0 && n <= p.Limit {
				part.RetryAfter = end
			}
			if m.count[i] > 0 {
				part.ResetAfter, part.RefillAfter = end, end
			}
		case GCRA:
			every := m.every(i)
			full := max(m.tat[i]-now, 0)
			part.Remaining = p.Limit - int((full+every-1)/every)
			fits := full+int64(n)*every <= int64(p.Limit)*every
			part.Allowed = n == 0 || n >= 0 && n <= p.Limit && fits
			if !part.Allowed && n > 0 && n <= p.Limit {
				part.RetryAfter = time.Duration(full + int64(n)*every - int64(p.Limit)*every)
			}
			part.ResetAfter = time.Duration(full)
			if full > 0 {
				part.RefillAfter = time.Duration(full - ((full+every-1)/every-1)*every)
			}
		}
		allowed = allowed && part.Allowed
	}
	if allowed && n > 0 {
		for i, p := range m.policies {
			part := &d.parts[i]
			w := int64(p.Window)
			part.Remaining -= n
			switch m.algorithm {
			case FixedWindow:
				m.count[i] += n
				wall := t0.UnixNano()
				end := time.Duration((floorDiv(wall+now, w)+1)*w - wall - now)
				part.ResetAfter, part.RefillAfter = end, end
			case GCRA:
				every := m.every(i)
				m.tat[i] = max(m.tat[i], now) + int64(n)*every
				full := m.tat[i] - now
				part.ResetAfter = time.Duration(full)
				part.RefillAfter = time.Duration(full - ((full+every-1)/every-1)*every)
			}
		}
	}
	d.Allowed = allowed
	return d
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
