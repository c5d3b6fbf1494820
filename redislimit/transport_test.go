package redislimit_test

import (
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keyrate/keyrate/httplimit/upstream"
	"github.com/keyrate/keyrate/redislimit"
	"github.com/keyrate/keyrate/redislimit/redistest"
)

// Two replicas call one paid API through upstream.NewTransport, each over
// its own redislimit.Limiter on one Redis: they share one budget of 5 a
// second, so the API never sees 6 calls within a second from the two
// together, and 12 calls take 2 seconds, as from one process.
//
// The test runs in a synctest bubble: the Limiters decide on its clock
// (wallClock, read in the bubble), the Transports wait on it, and it moves
// only once every caller is waiting, so each wait lasts exactly what the
// Transport asked for. The API is a RoundTripper in the bubble, which
// records when each call reaches it.
func TestTransportSharesTheBudgetAcrossReplicas(t *testing.T) {
	addr := redistest.Shared(t).Addr()
	prefix := uniquePrefix()
	synctest.Test(t, func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer client.Close()
		start := time.Now()
		var mu sync.Mutex
		var arrivals []time.Duration
		api := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			arrivals = append(arrivals, time.Since(start))
			mu.Unlock()
			return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
		})
		var wg sync.WaitGroup
		for range 2 {
			l, err := redislimit.New(client, 5, time.Second, redislimit.WithPrefix(prefix), redislimit.WithClock(wallClock{}))
			require.NoError(t, err)
			tr, err := upstream.NewTransport(api, l)
			require.NoError(t, err)
			replica := &http.Client{Transport: tr}
			for range 6 {
				wg.Go(func() {
					resp, err := replica.Get("http://api.example/")
					if assert.NoError(t, err) {
						resp.Body.Close()
					}
				})
			}
		}
		wg.Wait()
		slices.Sort(arrivals)
		require.Len(t, arrivals, 12)
		for i := 5; i < len(arrivals); i++ {
			assert.GreaterOrEqual(t, arrivals[i]-arrivals[i-5], time.Second, "6 calls within a second: %v", arrivals)
		}
		assert.Equal(t, 2*time.Second, arrivals[11]-arrivals[0], "12 calls under 5 a second take 2s: %v", arrivals)
	})
}

// wallClock is time.Now as a keyrate.Clock: in a synctest bubble, the
// bubble's clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// roundTripFunc adapts a function to http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
