package librarybench

import (
	"errors"
	"testing"

	"github.com/sony/gobreaker/v2"
)

// BenchmarkGobreaker measures what sony/gobreaker costs a call while the
// store answers, the closed state: Execute, which runs the call under the
// breaker, and the two-step breaker's Allow and its done, for a caller that
// runs the call itself, as redislimit's decision path would (the call here
// does nothing, so that only the breaker is measured). Serial is one
// caller; Parallel, every CPU's goroutines calling at once.
func BenchmarkGobreaker(b *testing.B) {
	call := func() (struct{}, error) { return struct{}{}, nil }
	run := func(b *testing.B, op func() error) {
		b.Run("Serial", func(b *testing.B) {
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("Parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("Execute", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Name: "redis"})
		run(b, func() error {
			_, err := cb.Execute(call)
			return err
		})
		if cb.State() != gobreaker.StateClosed {
			b.Fatalf("state %v, want closed", cb.State())
		}
	})
	b.Run("TwoStep", func(b *testing.B) {
		cb := gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{Name: "redis"})
		run(b, func() error {
			done, err := cb.Allow()
			if err != nil {
				return err
			}
			done(nil)
			return nil
		})
		if cb.State() != gobreaker.StateClosed {
			b.Fatalf("state %v, want closed", cb.State())
		}
	})
}

// A breaker that trips on the first failure, as redislimit's does, opens at
// once and refuses the next call without running it.
func TestGobreakerTripsOnFirstFailure(t *testing.T) {
	cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 },
	})
	down := errors.New("down")
	if _, err := cb.Execute(func() (struct{}, error) { return struct{}{}, down }); !errors.Is(err, down) {
		t.Fatalf("first call: %v, want %v", err, down)
	}
	ran := false
	_, err := cb.Execute(func() (struct{}, error) { ran = true; return struct{}{}, nil })
	if !errors.Is(err, gobreaker.ErrOpenState) || ran {
		t.Fatalf("second call: ran %v, %v; want refused with ErrOpenState", ran, err)
	}
}
