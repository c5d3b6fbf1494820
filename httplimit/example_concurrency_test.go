package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
)

// reports limits GET /api/report, a slow endpoint, to 2 requests in
// flight per API key beside 20 a minute: a third, while two run, waits
// up to a second for one of them to end, then gets 429.
func reports(mux *http.ServeMux, reportHandler http.Handler) error {
	rate, err := keyrate.New(20, time.Minute)
	if err != nil {
		return err
	}
	running, err := keyrate.NewConcurrency(2, nil, nil)
	if err != nil {
		return err
	}
	report, err := httplimit.New(rate,
		httplimit.WithRoute("report"),
		httplimit.WithKeyFunc(httplimit.HeaderKey("X-API-Key", nil)),
		httplimit.WithConcurrency(running, time.Second), // 2 at once, a bounded wait for a third
	)
	if err != nil {
		return err
	}
	mux.Handle("GET /api/report", report.Handler(reportHandler))
	return nil
}

// Two reports of alice's run; a third waits its second and is refused,
// with the in-flight limit beside the rate in its fields.
func Example_concurrency() {
	started, finish := make(chan struct{}), make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-finish
	})
	mux := http.NewServeMux()
	if err := reports(mux, slow); err != nil {
		log.Fatal(err)
	}
	request := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/api/report", nil)
		req.Header.Set("X-API-Key", "alice")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	done := make(chan struct{})
	for range 2 {
		go func() { request(); done <- struct{}{} }()
		<-started
	}
	rec := request()
	fmt.Println(rec.Code, "Retry-After:", rec.Header().Get("Retry-After"))
	fmt.Println(rec.Header().Values("RateLimit-Policy"))
	close(finish)
	<-done
	<-done
	// Output:
	// 429 Retry-After: 1
	// ["report-inflight";q=2;qu="concurrent-requests" "report";q=20;w=60]
}
