package adapter

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/middleware"
)

var _ middleware.Concurrency = (*keyrate.Concurrency)(nil)

func TestNewSlots(t *testing.T) {
	c, err := keyrate.NewConcurrency(1, nil, nil)
	require.NoError(t, err)
	_, err = newSlots(nil, 0)
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = newSlots(c, -time.Nanosecond)
	assert.ErrorIs(t, err, keyrate.ErrConfig)
	_, err = newSlots(c, 0)
	assert.NoError(t, err)
}

// A wait that runs out is a full key, not an error; a request whose own
// context ends first, while it waits or before, has gone.
func TestSlotsAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := keyrate.NewConcurrency(1, nil, nil)
		require.NoError(t, err)
		s, err := newSlots(c, 2*time.Second)
		require.NoError(t, err)
		ctx := context.Background()

		hold, limit, err := s.acquire(ctx, "k", "k", false)
		require.NoError(t, err)
		require.NotNil(t, hold)
		assert.Equal(t, 1, limit)

		start := time.Now()
		release, limit, err := s.acquire(ctx, "k", "k", false)
		assert.NoError(t, err, "a wait that runs out is no error")
		assert.Nil(t, release)
		assert.Equal(t, 1, limit)
		assert.Equal(t, 2*time.Second, time.Since(start), "it waited the whole wait")

		start = time.Now()
		release, _, err = s.acquire(ctx, "k", "k", true)
		assert.NoError(t, err)
		assert.Nil(t, release)
		assert.Zero(t, time.Since(start), "shadow mode never waits")

		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, _, err = s.acquire(short, "k", "k", false)
		assert.ErrorIs(t, err, middleware.ErrClientGone, "the request's own deadline came first")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		_, _, err = s.acquire(short, "k", "k", false)
		assert.ErrorIs(t, err, middleware.ErrClientGone, "a done request is not asked about")

		hold()
		assert.Equal(t, 0, c.Len())
	})
}

// The store's tier function sees the identity as sent.
func TestSlotsPassTheIdentity(t *testing.T) {
	plan := func(id string) string {
		if strings.HasPrefix(id, "pro-") {
			return "pro"
		}
		return ""
	}
	c, err := keyrate.NewConcurrency(1, plan, map[string]int{"pro": 4})
	require.NoError(t, err)
	s, err := newSlots(c, 0)
	require.NoError(t, err)
	_, limit, err := s.acquire(context.Background(), "route\x00x-api-key=pro-1", "pro-1", false)
	require.NoError(t, err)
	assert.Equal(t, 4, limit)
}

func TestSlotRefusal(t *testing.T) {
	d := slotRefusal("search", 3)
	assert.False(t, d.Allowed)
	assert.Equal(t, "search-inflight", d.Policy)
	assert.Equal(t, 3, d.Limit)
	assert.Equal(t, time.Second, d.RetryAfter)
	assert.Equal(t, "inflight", slotPolicy("", 2).Name)
}
