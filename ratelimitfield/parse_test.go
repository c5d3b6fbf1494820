package ratelimitfield_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/ratelimitfield"
)

func TestParseRateLimit(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  []ratelimitfield.Quota
	}{
		{[]string{`"default";r=50;t=30`}, []ratelimitfield.Quota{{Name: "default", Remaining: 50, Reset: 30 * time.Second, HasReset: true}}},
		{[]string{`"second";r=9;t=1, "day";r=990;t=51840`}, []ratelimitfield.Quota{
			{Name: "second", Remaining: 9, Reset: time.Second, HasReset: true},
			{Name: "day", Remaining: 990, Reset: 51840 * time.Second, HasReset: true},
		}},
		{[]string{`"a";r=0`, ` b; r=3;t=2;pk=:AAE=:;x="y";z=1.5;w=?1`}, []ratelimitfield.Quota{
			{Name: "a"},
			{Name: "b", Remaining: 3, Reset: 2 * time.Second, HasReset: true},
		}},
		{[]string{`"q\"uote\\d";r=1`}, []ratelimitfield.Quota{{Name: `q"uote\d`, Remaining: 1}}},
		{nil, nil},
		{[]string{""}, nil},
	} {
		got, err := ratelimitfield.ParseRateLimit(tc.lines)
		require.NoError(t, err, "%q", tc.lines)
		assert.Equal(t, tc.want, got, "%q", tc.lines)
	}
}

func TestParseRateLimitErrors(t *testing.T) {
	for _, bad := range []string{
		`"a";t=3`,                // no r
		`"a";r=-1`,               // negative r
		`"a";r=1.5`,              // not an integer
		`"a";r="3"`,              // a string
		`"a";r=1;t=-2`,           // negative t
		`"a";r=1,`,               // trailing comma
		`"a";r=1 "b";r=2`,        // no comma
		`"a;r=1`,                 // a string that does not end
		`("a" "b");r=1`,          // an inner list
		`1;r=1`,                  // a number for a name
		`"a";r=1234567890123456`, // 16 digits
		`"a";R=1`,                // a key in upper case
		"\"a\x01\";r=1",          // a control byte
	} {
		_, err := ratelimitfield.ParseRateLimit([]string{bad})
		assert.Error(t, err, "%q", bad)
	}
}

// What AppendRateLimit writes, ParseRateLimit reads back: every member's
// name, r and t.
func TestParseRateLimitReadsWhatIsWritten(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, backend.MaxPolicies).Draw(t, "policies")
		parts := make([]keyrate.PolicyDecision, n)
		for i := range parts {
			parts[i] = keyrate.PolicyDecision{
				Policy:      keyrate.Policy{Name: rapid.StringMatching(`[ -~]{0,12}`).Draw(t, "name"), Limit: 100, Window: time.Hour},
				Allowed:     true,
				Remaining:   rapid.IntRange(-1, 100).Draw(t, "remaining"),
				RefillAfter: time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "refill")),
			}
			parts[i].ResetAfter = parts[i].RefillAfter
		}
		d := backend.Combine(parts...)
		route := rapid.StringMatching(`[a-z]{0,8}`).Draw(t, "route")
		got, err := ratelimitfield.ParseRateLimit([]string{string(ratelimitfield.AppendRateLimit(nil, &d, route))})
		require.NoError(t, err)
		require.Len(t, got, n)
		for i, p := range d.Policies() {
			name := string(ratelimitfield.AppendName(nil, p.Name, route))
			assert.Equal(t, name[1:len(name)-1], strings.ReplaceAll(strings.ReplaceAll(got[i].Name, `\`, `\\`), `"`, `\"`))
			assert.Equal(t, int64(max(p.Remaining, 0)), got[i].Remaining)
			assert.Equal(t, p.RefillAfter > 0, got[i].HasReset)
			if got[i].HasReset {
				assert.Equal(t, time.Duration(ratelimitfield.Seconds(p.RefillAfter))*time.Second, got[i].Reset)
			}
		}
	})
}

func FuzzParseRateLimit(f *testing.F) {
	for _, s := range []string{`"default";r=50;t=30`, `a;r=1, b;r=2;t=3`, `"x";r=1;pk=:AA==:`, `"`, `;`, `"a";r=`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		qs, err := ratelimitfield.ParseRateLimit([]string{s})
		if err != nil {
			return
		}
		for _, q := range qs {
			if q.Remaining < 0 || q.Reset < 0 {
				t.Fatalf("%q: %+v", s, q)
			}
		}
	})
}
