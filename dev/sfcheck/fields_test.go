package sfcheck

import (
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/backend"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/ratelimitfield"
)

var revisions = []ratelimitfield.Revision{ratelimitfield.Draft10, ratelimitfield.Proposal166}

// schema is what each field's members may carry in a Revision: the
// parameters with their kinds, and which are required.
type schema struct {
	params   map[string]string // name -> "int" (a non-negative Integer), "pos" (a positive one), "string"
	required []string
}

var policySchema = schema{map[string]string{"q": "int", "qu": "string", "w": "pos"}, []string{"q"}}

func rateLimitSchema(v ratelimitfield.Revision) schema {
	if v == ratelimitfield.Proposal166 {
		return schema{map[string]string{"a": "int", "w": "int", "c": "int"}, []string{"a", "c"}}
	}
	return schema{map[string]string{"r": "int", "t": "int"}, []string{"r"}}
}

// member is one parsed list member: the policy it names and its
// parameters.
type member struct {
	name   string
	params map[string]any
}

// parse reads the field lines of one field as a List of Items whose bare
// values are Strings, with the parameters s allows, of their kinds, and
// checks that the parser writes the same list back byte for byte (the
// lines joined as RFC 9110 combines them): keyrate writes the canonical
// serialization.
func parse(t *testing.T, s schema, lines ...string) []member {
	t.Helper()
	list, err := httpsfv.UnmarshalList(lines)
	require.NoError(t, err, "%q", lines)
	again, err := httpsfv.Marshal(list)
	require.NoError(t, err)
	joined := ""
	for i, l := range lines {
		if i > 0 {
			joined += ", "
		}
		joined += l
	}
	assert.Equal(t, joined, again, "the parser's serialization of %q", lines)
	var ms []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		require.True(t, ok, "%q: a member is %T, want an Item", lines, m)
		name, ok := item.Value.(string)
		require.True(t, ok, "%q: a member's value is %T, want a String", lines, item.Value)
		got := member{name, map[string]any{}}
		for _, k := range item.Params.Names() {
			v, _ := item.Params.Get(k)
			kind, known := s.params[k]
			require.True(t, known, "%q: parameter %q", lines, k)
			switch kind {
			case "int", "pos":
				n, ok := v.(int64)
				require.True(t, ok && n >= 0 && (kind == "int" || n > 0), "%q: %s=%v", lines, k, v)
			case "string":
				_, ok := v.(string)
				require.True(t, ok, "%q: %s=%v", lines, k, v)
			}
			got.params[k] = v
		}
		for _, k := range s.required {
			_, ok := got.params[k]
			require.True(t, ok, "%q: %s is required", lines, k)
		}
		ms = append(ms, got)
	}
	return ms
}

func names(ms []member) []string {
	var ns []string
	for _, m := range ms {
		ns = append(ns, m.name)
	}
	return ns
}

// The fields of decisions a client can cause, every Revision: the values a
// parser reads are the decision's, member for member.
func TestFieldsParse(t *testing.T) {
	second := keyrate.Policy{Name: "second", Limit: 10, Window: time.Second}
	day := keyrate.Policy{Name: "day", Limit: 1000, Window: 24 * time.Hour}
	odd := keyrate.Policy{Name: `a "quoted" \ name, é`, Limit: 3, Window: 1500 * time.Millisecond}
	for _, tc := range []struct {
		name string
		d    keyrate.Decision
		unit string
	}{
		{"two policies, admitted", backend.Combine(
			keyrate.PolicyDecision{Policy: second, Allowed: true, Remaining: 9, RefillAfter: time.Second},
			keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 990, RefillAfter: 51840 * time.Second}), ""},
		{"refused by one", backend.Combine(
			keyrate.PolicyDecision{Policy: second, RetryAfter: 300 * time.Millisecond, RefillAfter: 300 * time.Millisecond},
			keyrate.PolicyDecision{Policy: day, Allowed: true, Remaining: 990}), ""},
		{"a name to escape, no whole-second window", backend.Combine(
			keyrate.PolicyDecision{Policy: odd, Allowed: true, Remaining: -1}), "content-bytes"},
		{"by hand, unnamed", keyrate.Decision{Allowed: true, Limit: 5, Window: time.Minute, Remaining: 4, ResetAfter: time.Minute}, ""},
	} {
		policy := string(ratelimitfield.AppendPolicy(nil, &tc.d, "api", tc.unit))
		ps := parse(t, policySchema, policy)
		for _, v := range revisions {
			rl := parse(t, rateLimitSchema(v), string(v.AppendRateLimit(nil, &tc.d, "api", 2)))
			assert.Equal(t, names(ps), names(rl), "%s, %v: the same policies in both fields", tc.name, v)
		}
		parts := tc.d.Policies()
		if len(parts) == 0 {
			continue
		}
		for i, p := range parts {
			assert.Equal(t, int64(p.Limit), ps[i].params["q"], tc.name)
		}
	}
	// The name a parser reads: escapes undone, what a String cannot hold
	// as '?'.
	d := backend.Combine(keyrate.PolicyDecision{Policy: odd, Allowed: true})
	assert.Equal(t, `a "quoted" \ name, ??`, parse(t, policySchema, string(ratelimitfield.AppendPolicy(nil, &d, "", "")))[0].name)
}

// Any decision, with any policy names, in every Revision, is a List the
// parser reads back member for member: the names as written, r or a at
// least 0, t or w when the window holds something, c the weight admitted.
func TestFieldsParseAnyDecision(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, backend.MaxPolicies).Draw(rt, "policies")
		parts := make([]keyrate.PolicyDecision, n)
		for i := range parts {
			parts[i] = keyrate.PolicyDecision{
				Policy: keyrate.Policy{
					Name:   rapid.String().Draw(rt, "name"),
					Limit:  rapid.IntRange(0, math.MaxInt32).Draw(rt, "limit"),
					Window: time.Duration(rapid.Int64Range(0, int64(400*24*time.Hour)).Draw(rt, "window")),
				},
				Allowed:     rapid.Bool().Draw(rt, "allowed"),
				Remaining:   rapid.IntRange(-5, math.MaxInt32).Draw(rt, "remaining"),
				RetryAfter:  time.Duration(rapid.Int64Range(0, int64(400*24*time.Hour)).Draw(rt, "retry")),
				RefillAfter: time.Duration(rapid.Int64Range(0, int64(400*24*time.Hour)).Draw(rt, "refill")),
			}
		}
		d := backend.Combine(parts...)
		route := rapid.String().Draw(rt, "route")
		cost := rapid.IntRange(-3, 1<<20).Draw(rt, "cost")
		if policy := ratelimitfield.AppendPolicy(nil, &d, route, "requests"); len(policy) > 0 {
			parse(t, policySchema, string(policy))
		}
		for _, v := range revisions {
			ms := parse(t, rateLimitSchema(v), string(v.AppendRateLimit(nil, &d, route, cost)))
			require.Len(t, ms, n)
			if v == ratelimitfield.Proposal166 {
				want := int64(0)
				if d.Allowed && cost > 0 {
					want = int64(cost)
				}
				for _, m := range ms {
					require.Equal(t, want, m.params["c"])
				}
			}
		}
	})
}

// What httplimit sends, nested middlewares' field lines together, in every
// Revision, through an admission and a refusal.
func TestHTTPFieldsParse(t *testing.T) {
	for _, v := range revisions {
		clock := keyrate.NewManualClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		global, err := keyrate.NewPolicies([]keyrate.Policy{{Name: "second", Limit: 10, Window: time.Second}, {Name: "day", Limit: 1000, Window: 24 * time.Hour}}, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer global.Close()
		search, err := keyrate.New(1, time.Minute, keyrate.WithClock(clock))
		require.NoError(t, err)
		defer search.Close()
		outer, err := httplimit.New(global, httplimit.WithRoute("global"), httplimit.WithFieldRevision(v))
		require.NoError(t, err)
		inner, err := httplimit.New(search, httplimit.WithRoute("search"), httplimit.WithFieldRevision(v), httplimit.WithQuotaUnit("requests"))
		require.NoError(t, err)
		h := outer.Handler(inner.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
		for i, code := range []int{200, 429} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
			require.Equal(t, code, rec.Code)
			ps := parse(t, policySchema, rec.Header().Values("RateLimit-Policy")...)
			rl := parse(t, rateLimitSchema(v), rec.Header().Values("RateLimit")...)
			want := []string{"second", "day", "search"}
			assert.Equal(t, want, names(ps), "%v, request %d", v, i)
			assert.Equal(t, want, names(rl), "%v, request %d", v, i)
			assert.Equal(t, "requests", ps[2].params["qu"])
			if v == ratelimitfield.Proposal166 {
				assert.Equal(t, int64(1-i), rl[2].params["c"], "c: 1 admitted, 0 refused")
			}
			if i == 1 {
				assert.Equal(t, "60", rec.Header().Get("Retry-After"))
				wait := rl[2].params[map[ratelimitfield.Revision]string{ratelimitfield.Draft10: "t", ratelimitfield.Proposal166: "w"}[v]]
				assert.Equal(t, int64(60), wait, "the refusing policy's wait is Retry-After")
			}
		}
	}
}
