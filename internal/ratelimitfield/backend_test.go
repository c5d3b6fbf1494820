package ratelimitfield

import (
	"context"
	"testing"
	"time"

	"github.com/keyrate/keyrate"
)

type (
	plain  struct{}
	lister struct {
		plain
		policies []keyrate.Policy
	}
)

func (plain) TakeContext(context.Context, string, int) (keyrate.Decision, error) {
	return keyrate.Decision{}, nil
}
func (l lister) Policies() []keyrate.Policy { return l.policies }

func TestBackendPolicies(t *testing.T) {
	two := []keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}}
	l, err := keyrate.New(5, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, c := range []struct {
		name string
		b    keyrate.Backend
		want []keyrate.Policy
	}{
		{"Policies", lister{policies: two}, two},
		{"no policies listed", lister{}, nil},
		{"nothing said", plain{}, nil},
		{"the in-process Limiter", l, []keyrate.Policy{{Limit: 5, Window: time.Hour}}},
	} {
		got := BackendPolicies(c.b)
		if len(got) != len(c.want) || !Same(PolicyParts(got), c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
