package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

// A model API's budget: 3 requests and 1,000 tokens a minute per API key,
// decided together. Each request reserves its max_tokens and keeps the
// tokens it used; one the tokens refuse spends no request.
func Example_tokenBudget() {
	// The backend: the requests policies are the default tier's, the
	// tokens policies the tier middleware.TokenTier names for a key's
	// tokens. On Redis: redislimit.NewPolicies with the same policies,
	// redislimit.WithTiers(middleware.TokenTier, ...) and, on a Cluster,
	// redislimit.WithHashTagFunc(middleware.TokenGroup).
	budgets, err := keyrate.NewPolicies(
		[]keyrate.Policy{{Name: "rpm", Limit: 3, Window: time.Minute}},
		keyrate.WithTiers(middleware.TokenTier, map[string][]keyrate.Policy{
			middleware.TokensTier: {{Name: "tpm", Limit: 1000, Window: time.Minute}},
		}))
	if err != nil {
		panic(err)
	}
	defer budgets.Close()
	generate, err := httplimit.New(budgets,
		httplimit.WithRoute("generate"),
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)),
		httplimit.WithWeight(func(r *http.Request) int { // reserve max_tokens
			n, err := strconv.Atoi(r.FormValue("max_tokens"))
			if err != nil {
				return -1 // never fits: 413
			}
			return n
		}),
		httplimit.WithTokenBudget(),
		httplimit.WithHeaders(httplimit.DraftHeaders|httplimit.TokenHeaders),
	)
	if err != nil {
		panic(err)
	}
	h := generate.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		middleware.ReportWeight(r.Context(), 100) // the model used 100 tokens
	}))

	for _, maxTokens := range []string{"600", "950", "600"} {
		req := httptest.NewRequest(http.MethodPost, "/v1/generate", strings.NewReader("max_tokens="+maxTokens))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-API-Key", "alice")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
		fmt.Println("  remaining requests:", rec.Header().Get("X-Ratelimit-Remaining-Requests"),
			"tokens:", rec.Header().Get("X-Ratelimit-Remaining-Tokens"))
	}
	// Output:
	// 200 "rpm";r=2;t=60, "tpm";r=900;t=60
	//   remaining requests: 2 tokens: 900
	// 429 "rpm";r=2;t=60, "tpm";r=900;t=60
	//   remaining requests: 2 tokens: 900
	// 200 "rpm";r=1;t=60, "tpm";r=800;t=60
	//   remaining requests: 1 tokens: 800
}
