package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/grpclimit"
)

// Two calls a minute per API key, on a real server. The third call, 15
// seconds later, fails with ResourceExhausted; its RetryInfo and the
// ratelimit metadata both say when it would fit.
func Example() {
	clock := keyrate.NewManualClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	l, _ := keyrate.New(2, time.Minute, keyrate.WithClock(clock))
	defer l.Close()
	lim, _ := grpclimit.New(l, grpclimit.WithMetadataKey("x-api-key"))

	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(lim.Unary()),
		grpc.ChainStreamInterceptor(lim.Stream()),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(ln)
	defer srv.Stop()

	conn, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "alice")

	for i := range 3 {
		if i == 2 {
			clock.Advance(15 * time.Second)
		}
		var header metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), header.Get("ratelimit-policy"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Println("retry in", ri.GetRetryDelay().AsDuration(), header.Get("ratelimit"))
			}
		}
	}
	// Output:
	// OK ["/grpc.health.v1.Health/Check";q=2;w=60]
	// OK ["/grpc.health.v1.Health/Check";q=2;w=60]
	// ResourceExhausted ["/grpc.health.v1.Health/Check";q=2;w=60]
	// retry in 45s ["/grpc.health.v1.Health/Check";r=0;t=45]
}
