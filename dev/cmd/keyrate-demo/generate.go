package main

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// The generate route's budgets per client, all in one place, as a model
// API sells them: requests a minute (sliding); tokens a minute (sliding),
// a calendar day and a month turning on the 15th, the billing day (UTC);
// all decided together (httplimit.WithTokenBudget); and requests in
// flight at once. Each list takes up to backend.MaxPolicies policies, and
// the route, the fields, the log and the live page follow them.
var (
	generateRequests  = []keyrate.Policy{{Name: "generate-requests", Limit: 20, Window: time.Minute}}
	generateTokens    = tokenPolicies(10_000, 200_000, 2_000_000)
	generateProTokens = tokenPolicies(50_000, 1_000_000, 10_000_000)
	// generateInFlight requests of a client run at once; another waits up
	// to generateInFlightWait for one of them to end.
	generateInFlight     = 4
	generateInFlightWait = 2 * time.Second
)

// tokenPolicies returns a plan's token budgets: perMinute in any minute,
// perDay a calendar day and perMonth a month from the billing day.
func tokenPolicies(perMinute, perDay, perMonth int) []keyrate.Policy {
	return []keyrate.Policy{
		{Name: "tokens-minute", Limit: perMinute, Window: time.Minute},
		{Name: "tokens-day", Limit: perDay, Calendar: keyrate.Daily(time.UTC)},
		{Name: "tokens-month", Limit: perMonth, Calendar: keyrate.Monthly(15, time.UTC)},
	}
}

// generateRoute stands for a model call behind a budget of requests and
// tokens a minute, a day and a month: each request counts against all of
// them, or none, and reserves its max_tokens before it runs and, once it
// knows, keeps only the tokens it used. A client has 20 requests and
// 10,000 tokens a minute, 200,000 a day and 2,000,000 a month (a "pro-" key
// five times the tokens), and 4 requests in flight. The live page
// offers a burst of 5 requests of its form's 2,000 tokens: the tokens
// budget, reserved in full.
var generateRoute = route{
	Name: "generate", Method: http.MethodPost, Path: "/api/generate",
	Policies: generateTokens, Pro: generateProTokens, Requests: generateRequests,
	InFlight: generateInFlight, InFlightWait: generateInFlightWait,
	Cost: reserveMaxTokens, Unit: "tokens", Burst: 5,
	Form: map[string]string{"max_tokens": "2000", "used": "500"},
	Note: "Each request counts against the client’s requests a minute and its tokens a minute, a day and a month (turning on the 15th, UTC) at once, or against none: " +
		"it reserves its max_tokens before it runs, then keeps only the tokens it used " +
		"(used, at most max_tokens; a quarter of it when not sent): the rest goes back. A max_tokens that is missing or below 1 is refused with 413.",
	serve:   serveGenerate,
	limited: generateLimited,
}

// maxGenerateBody bounds what /api/generate reads of a request: its form
// is two numbers.
const maxGenerateBody = 4 << 10

// neverFits is the weight of a request whose max_tokens cannot be read: it
// can never be admitted, so the middleware answers 413 with no wait that
// would help (httplimit.WithWeight), and the request reserves nothing.
const neverFits = -1

// reserveMaxTokens is /api/generate's cost (httplimit.WithWeight): the
// max_tokens of its form, reserved from the client's tokens a minute
// before the handler runs, as a model call reserves the most it may
// generate. A max_tokens that is missing or not a whole number from 1 up
// weighs neverFits; one above the client's limit can never fit either.
func reserveMaxTokens(r *http.Request) int {
	n, err := formTokens(r, "max_tokens")
	if err != nil || n < 1 {
		return neverFits
	}
	return n
}

// serveGenerate stands for a model call: it "generates" the tokens the
// form's used says (by default a quarter of max_tokens, rounded up; never
// more than max_tokens), reports them with middleware.ReportWeight before it
// writes its answer, so that the middleware gives back what the request
// reserved and did not use and the RateLimit fields say what it left, and
// answers what it reserved and used. settled says whether the report was
// taken: it is not when the request holds no reservation (a budget that
// cannot give part of a decision back, or one that could not be reached,
// when the middleware serves without a limit). A form it cannot read gets
// 400, and a request that says nothing it can read of what it used keeps
// all it reserved.
func serveGenerate(w http.ResponseWriter, r *http.Request) {
	reserved, err := formTokens(r, "max_tokens")
	if err == nil && reserved < 1 {
		err = errors.New("max_tokens must be 1 or more")
	}
	if err != nil {
		writeGenerateError(w, err)
		return
	}
	used := reserved / 4
	if reserved%4 != 0 {
		used++ // a quarter, rounded up
	}
	if r.Form.Has("used") {
		if used, err = formTokens(r, "used"); err != nil {
			writeGenerateError(w, err)
			return
		}
	}
	used = min(used, reserved)
	settled := middleware.ReportWeight(r.Context(), used) == nil
	writeJSON(w, map[string]any{"reserved": reserved, "used": used, "settled": settled})
}

// formTokens reads the form field name of r as a count of tokens, 0 or
// more, reading r's body (at most maxGenerateBody) on the first call.
func formTokens(r *http.Request, name string) (int, error) {
	if r.Form == nil {
		r.Body = http.MaxBytesReader(nil, r.Body, maxGenerateBody)
		if err := r.ParseForm(); err != nil {
			return 0, errors.New("the body is not a form such as max_tokens=2000&used=500")
		}
	}
	if !r.Form.Has(name) {
		return 0, errors.New("no " + name + " field in the form")
	}
	n, err := strconv.Atoi(r.Form.Get(name))
	if err != nil || n < 0 {
		return 0, errors.New(name + " must be a whole number of tokens, 0 or more")
	}
	return n, nil
}

func writeGenerateError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": err.Error()})
}

// generateLimited answers the requests /api/generate refuses as httplimit
// does, but for a max_tokens it cannot read (weighed neverFits), which gets
// a 413 that says so rather than that the request costs too much.
func generateLimited(w http.ResponseWriter, r *http.Request, e middleware.Event) {
	if e.Weight != neverFits {
		httplimit.DefaultLimitedHandler(w, r, e)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_ = json.NewEncoder(w).Encode(problem{
		Type: "about:blank", Title: http.StatusText(http.StatusRequestEntityTooLarge), Status: http.StatusRequestEntityTooLarge,
		Detail: "max_tokens must be a whole number of tokens, 1 or more: the request reserves it before it runs.",
	})
}

// problem is an RFC 9457 problem body, its members in httplimit's order.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}
