package adapter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/internal/tokenkey"
	"github.com/keyrate/keyrate/middleware"
)

// stuckAll is an AllTaker that is not Bounded and answers only when its
// context ends.
type stuckAll struct{}

func (stuckAll) TakeContext(ctx context.Context, _ string, _ int) (keyrate.Decision, error) {
	<-ctx.Done()
	return keyrate.Decision{}, ctx.Err()
}

func (stuckAll) TakeAll(ctx context.Context, _ []keyrate.Hit) ([]keyrate.Decision, bool, error) {
	<-ctx.Done()
	return nil, false, ctx.Err()
}

// TakeAll is bounded as Take is: a backend that is not Bounded gets the
// budget and no more, a request whose client has gone is not asked about,
// and a backend that cannot take all is an ErrConfig.
func TestCallerTakeAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := mustCaller(t, stuckAll{}, 50*time.Millisecond)
		if !c.CanTakeAll() {
			t.Fatal("an AllTaker cannot take all")
		}
		start := time.Now()
		_, _, err := c.TakeAll(t.Context(), []keyrate.Hit{{Key: "a", Weight: 1}})
		if !errors.Is(err, middleware.ErrBudgetExceeded) || time.Since(start) != 50*time.Millisecond {
			t.Errorf("a stuck backend: %v after %v, want ErrBudgetExceeded after the budget", err, time.Since(start))
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if _, _, err := c.TakeAll(ctx, nil); !errors.Is(err, middleware.ErrClientGone) {
			t.Errorf("a gone client: %v, want ErrClientGone", err)
		}
	})
	plain := mustCaller(t, backend.Func(func(context.Context, string, int) (keyrate.Decision, error) {
		return keyrate.Decision{}, nil
	}), time.Second)
	if _, _, err := plain.TakeAll(t.Context(), nil); plain.CanTakeAll() || !errors.Is(err, keyrate.ErrConfig) {
		t.Errorf("a backend that cannot take all: CanTakeAll %v, %v", plain.CanTakeAll(), err)
	}
	l, err := keyrate.New(1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ds, ok, err := mustCaller(t, l, 0).TakeAll(t.Context(), []keyrate.Hit{{Key: "a", Weight: 1}, {Key: "b", Weight: 2}})
	if err != nil || ok || len(ds) != 2 || !ds[0].Allowed || ds[1].Allowed {
		t.Errorf("the Limiter's TakeAll through the Caller: %v %v %+v, want b refusing, a as it stands", ok, err, ds)
	}
}

// TokenDecision stands for the request: the tokens when admitted, the
// refusing budget when refused, the one that can never fit first, else
// the longer wait.
func TestTokenDecision(t *testing.T) {
	ok := keyrate.Decision{Allowed: true, Policy: "ok"}
	wait := func(name string, d time.Duration) keyrate.Decision {
		return keyrate.Decision{Policy: name, RetryAfter: d}
	}
	for _, c := range []struct {
		req, tok keyrate.Decision
		admitted bool
		want     string
	}{
		{keyrate.Decision{Allowed: true, Policy: "rpm"}, keyrate.Decision{Allowed: true, Policy: "tpm"}, true, "tpm"},
		{wait("rpm", time.Second), ok, false, "rpm"},
		{ok, wait("tpm", time.Second), false, "tpm"},
		{wait("rpm", 2*time.Second), wait("tpm", time.Second), false, "rpm"},
		{wait("rpm", time.Second), wait("tpm", 2*time.Second), false, "tpm"},
		{wait("rpm", time.Second), wait("tpm", 0), false, "tpm"}, // never fits
		{wait("rpm", 0), wait("tpm", time.Second), false, "rpm"},
	} {
		d := TokenDecision([]keyrate.Decision{c.req, c.tok}, c.admitted)
		if d.Policy != c.want || d.Allowed != c.admitted {
			t.Errorf("%s/%s admitted %v: %s allowed %v, want %s", c.req.Policy, c.tok.Policy, c.admitted, d.Policy, d.Allowed, c.want)
		}
	}
}

// The suffixes are the ones middleware.TokenTier and TokenGroup read.
func TestSuffixes(t *testing.T) {
	if RequestsSuffix != tokenkey.RequestsSuffix || TokensSuffix != tokenkey.TokensSuffix {
		t.Errorf("suffixes %q, %q; middleware reads %q, %q", RequestsSuffix, TokensSuffix, tokenkey.RequestsSuffix, tokenkey.TokensSuffix)
	}
}
