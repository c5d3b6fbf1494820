package backendtest

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// RunIdentities checks that a client cannot lift its own limit through the
// identity it sends, behind httplimit, in both failure modes, with
// identities too long or too empty for a store to place. It sends the same
// request ten times for each identity, under a limit of three, and checks that at most three are served: exactly three for long
// identities (bounded, never refused as invalid, never let through as a
// store failure), none for an empty one (answered 400 and reported to
// OnError), in FailOpen and FailClosed alike, with and without a route. Two
// long identities that differ only in their last byte keep two budgets.
func RunIdentities(t *testing.T, newBackend NewBackend) {
	const (
		limit    = 3
		window   = time.Minute
		requests = 10
	)
	long := strings.Repeat("k", 1<<10)
	quarter := strings.Repeat("h", 256)
	joined := http.Header{"A": {quarter}, "B": {quarter}, "C": {quarter}, "D": {quarter}}
	cases := []struct {
		name   string
		key    httplimit.KeyFunc
		ids    []string // each sent ten times, in turn, as the Identity header
		header http.Header
		served int // per identity
	}{
		{"1KiB", identity, []string{long}, nil, limit},
		{"64KiB", identity, []string{strings.Repeat("k", 64<<10)}, nil, limit},
		{"two 1KiB differing in the last byte", identity, []string{long, long[:len(long)-1] + "x"}, nil, limit},
		{"1KiB API key", httplimit.HeaderKey("Identity", nil), []string{long}, nil, limit},
		{"four 256-byte headers joined", httplimit.Join(
			httplimit.HeaderKey("A", nil), httplimit.HeaderKey("B", nil),
			httplimit.HeaderKey("C", nil), httplimit.HeaderKey("D", nil),
		), []string{""}, joined, limit},
		{"empty", identity, []string{""}, nil, 0},
	}
	modes := []struct {
		name string
		mode middleware.FailureMode
	}{{"fail-open", middleware.FailOpen}, {"fail-closed", middleware.FailClosed}}
	for _, mode := range modes {
		for _, route := range []string{"", "api"} {
			for _, c := range cases {
				t.Run(mode.name+"/route="+route+"/"+c.name, func(t *testing.T) {
					var errs []error
					m, err := httplimit.New(newBackend(t, limit, window, keyrate.NewManualClock(start)),
						httplimit.WithRoute(route),
						httplimit.WithFailureMode(mode.mode),
						httplimit.WithKeyFunc(c.key),
						httplimit.WithOnError(func(e middleware.Event) { errs = append(errs, e.Err) }),
					)
					if err != nil {
						t.Fatal(err)
					}
					h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						w.Write([]byte("served"))
					}))
					served, codes := sendIdentities(h, c.ids, c.header, requests)
					for i, n := range served {
						if n != c.served {
							t.Fatalf("identity %d: %d of %d requests served (all codes: %v), want %d", i, n, requests, codes, c.served)
						}
					}
					total := requests * len(c.ids)
					if c.served == 0 {
						if codes[http.StatusBadRequest] != total || len(errs) != total {
							t.Fatalf("codes %v, %d errors reported; want %d x 400, each reported", codes, len(errs), total)
						}
						for _, err := range errs {
							if !errors.Is(err, keyrate.ErrInvalidKey) {
								t.Fatalf("reported %v, want keyrate.ErrInvalidKey", err)
							}
						}
						return
					}
					if codes[http.StatusTooManyRequests] != total-c.served*len(c.ids) || len(errs) != 0 {
						t.Fatalf("codes %v, errors %v; want the rest refused 429 and no error", codes, errs)
					}
				})
			}
		}
	}
}

// sendIdentities sends each of ids, in turn, requests times as the
// Identity header (beside header) to h, and returns how many requests of
// each identity h served and how many got each status code.
func sendIdentities(h http.Handler, ids []string, header http.Header, requests int) ([]int, map[int]int) {
	served := make([]int, len(ids))
	codes := map[int]int{}
	for range requests {
		for i, id := range ids {
			r := httptest.NewRequest("GET", "/", nil)
			for k, v := range header {
				r.Header[k] = v
			}
			r.Header.Set("Identity", id)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			codes[rec.Code]++
			if rec.Body.String() == "served" {
				served[i]++
			}
		}
	}
	return served, codes
}

// identity identifies a request by its Identity header, whatever its length.
func identity(r *http.Request) (string, error) { return r.Header.Get("Identity"), nil }
