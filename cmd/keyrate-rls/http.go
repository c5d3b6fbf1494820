package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds a /json request's body. A request with every
// descriptor Envoy allows fits many times over.
const maxJSONBody = 1 << 20

// newHTTPHandler serves GET /healthcheck (200 while healthy reports so, 503
// otherwise: before the service is up and once it is shutting down),
// POST /json (ShouldRateLimit, the request and the response as protojson)
// and GET /metrics from gatherer.
func newHTTPHandler(svc *service, healthy func() bool, gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !healthy() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "NOT READY\n")
			return
		}
		io.WriteString(w, "OK\n")
	})
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("the body is over %d bytes", maxJSONBody), http.StatusRequestEntityTooLarge)
			return
		} else if err != nil {
			http.Error(w, "reading the request failed", http.StatusBadRequest)
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			// The parser's message is left out: it may quote a descriptor value.
			http.Error(w, "the body is not a RateLimitRequest in protojson", http.StatusBadRequest)
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code := http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable:
				code = http.StatusServiceUnavailable
			case codes.Canceled, codes.DeadlineExceeded:
				code = http.StatusGatewayTimeout
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			// As envoyproxy/ratelimit answers: a client of /json can act on
			// the status alone.
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	return mux
}
