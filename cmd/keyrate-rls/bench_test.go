package main

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// benchConfig admits every request of the benchmarks: they measure a
// decision, not refusals.
const benchConfig = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// benchKeys is how many phone numbers the requests spread over, so that
// the benchmarks measure many budgets, not one hot key.
const benchKeys = 10_000

// benchRequests returns requests of one descriptor (to_number), or of two
// (the nested marketing rule and to_number, decided together), one per
// phone number.
func benchRequests(descriptors int) []*rlspb.RateLimitRequest {
	reqs := make([]*rlspb.RateLimitRequest, benchKeys)
	for i := range reqs {
		number := strconv.Itoa(2060000000 + i)
		if descriptors == 1 {
			reqs[i] = request("messaging", desc("to_number", number))
		} else {
			reqs[i] = request("messaging", desc("message_type", "marketing", "to_number", number), desc("to_number", number))
		}
	}
	return reqs
}

// BenchmarkShouldRateLimit measures decisions per second through the gRPC
// handler called directly, and through a gRPC client over loopback, one
// caller and many; and through the handler with budgets in a redis-server
// on loopback, one caller and many.
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, descriptors := range []int{1, 2} {
		reqs := benchRequests(descriptors)
		name := strconv.Itoa(descriptors) + "desc"
		for _, callers := range []int{1, 8} {
			b.Run("redis-handler/"+strconv.Itoa(callers)+"-per-core/"+name, func(b *testing.B) {
				st, err := newRedisStore(context.Background(), redisOptions{
					addr: startRedis(b), prefix: defaultRedisPrefix, timeout: time.Second, denyCache: 10_000,
				})
				if err != nil {
					b.Fatal(err)
				}
				h := newHarnessOn(b, st, benchConfig)
				var next atomic.Int64
				b.ReportAllocs()
				b.SetParallelism(callers) // callers per core: a call to Redis mostly waits
				b.RunParallel(func(pb *testing.PB) {
					ctx := context.Background()
					for pb.Next() {
						resp, err := h.svc.ShouldRateLimit(ctx, reqs[next.Add(1)%benchKeys])
						if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
							b.Error(resp, err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			})
		}
	}
	for _, descriptors := range []int{1, 2} {
		reqs := benchRequests(descriptors)
		name := strconv.Itoa(descriptors) + "desc"
		b.Run("handler/"+name, func(b *testing.B) {
			h := newHarness(b, benchConfig)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				resp, err := h.svc.ShouldRateLimit(ctx, reqs[i%benchKeys])
				if err != nil || resp.OverallCode != rlspb.RateLimitResponse_OK {
					b.Fatal(resp, err)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run("handler-parallel/"+name, func(b *testing.B) {
			h := newHarness(b, benchConfig)
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := h.svc.ShouldRateLimit(ctx, reqs[next.Add(1)%benchKeys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run("grpc/"+name, func(b *testing.B) {
			client := loopback(b)
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := client.ShouldRateLimit(ctx, reqs[i%benchKeys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run("grpc-parallel/"+name, func(b *testing.B) {
			client := loopback(b)
			var next atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(8) // callers per core: a gRPC call mostly waits
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := client.ShouldRateLimit(ctx, reqs[next.Add(1)%benchKeys]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// loopback serves a service of benchConfig on a loopback port and returns
// a client of it.
func loopback(b *testing.B) rlspb.RateLimitServiceClient {
	h := newHarness(b, benchConfig)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(gs, h.svc)
	go gs.Serve(ln)
	b.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}
