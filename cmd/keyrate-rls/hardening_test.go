package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The tests in this file attack the binary as a client could: with idle
// connections, stalled calls, a slow Redis and weights as large as the
// protocol carries. Each talks to loopback only, bounded in count and
// time.

// raiseFileLimit makes sure this process may hold n more files open, up
// to its hard limit, and skips the test when that is too low.
func raiseFileLimit(t *testing.T, n int) {
	t.Helper()
	var r syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r))
	want := uint64(n + 512)
	if r.Cur >= want {
		return
	}
	if r.Max < want {
		t.Skipf("this test holds %d connections; the hard limit of open files is %d (raise it: ulimit -Hn %d)", n, r.Max, want)
	}
	r.Cur = want
	require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r))
}

// loopbackDialer dials from 127.0.0.x: loopback has all of 127.0.0.0/8,
// so that one machine's test can be many clients.
func loopbackDialer(x int) *net.Dialer {
	return &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(x))}}
}

// http2Preface is what an HTTP/2 client sends first: the preface and an
// empty SETTINGS frame. A connection that sent it and nothing more is an
// idle HTTP/2 connection to the server.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"

// holdIdle opens n connections to addr from `from` loopback addresses in
// turn (127.0.0.10 on), writing hello on each, and keeps them open until
// the test ends.
func holdIdle(t *testing.T, addr string, n, from int, hello string) {
	t.Helper()
	var mu sync.Mutex
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	var wg sync.WaitGroup
	for w := range from { // an opener per address, all at once
		wg.Go(func() {
			d := loopbackDialer(10 + w)
			d.Timeout = time.Second
			for range n / from {
				c, err := d.Dial("tcp", addr)
				if err != nil {
					continue // the server's backlog or a cap: the test counts on the server, not on these
				}
				c.Write([]byte(hello))
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Greater(t, len(conns), n/2, "connections opened")
}

// rss returns a process's resident set in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc to read a process's memory from: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// While 5,000 idle connections from 40 addresses are held on either port,
// a client from another address is still served, at once, on both; the
// service holds a bounded number of them. The binary runs with 2,048 open
// files, so that an unbounded server would run out long before.
func TestIdleConnectionsLockNoOneOut(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 5,000 connections")
	}
	const held, from = 5000, 40
	raiseFileLimit(t, 2*held)
	s := startBinaryUnder(t, []string{"/bin/sh", "-c", `ulimit -n 2048 && exec "$0" "$@"`}, nil,
		"-config", writeTemp(t, binaryConfig(t)), "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0", "-reload-interval", "0")
	before := rss(t, s.cmd.Process.Pid)
	grpcClient := func(x int) rlspb.RateLimitServiceClient {
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return loopbackDialer(x).DialContext(ctx, "tcp", addr)
			}))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close() })
		return rlspb.NewRateLimitServiceClient(conn)
	}
	served := func(x int) {
		t.Helper()
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		resp, err := grpcClient(x).ShouldRateLimit(ctx, request("d", desc("b", "from-"+strconv.Itoa(x))))
		if assert.NoError(t, err, "gRPC from 127.0.0.%d", x) {
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode())
		}
		assert.Less(t, time.Since(start), time.Second)

		start = time.Now()
		hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: loopbackDialer(x + 1).DialContext}}
		hr, err := hc.Get(s.httpBase + "/healthcheck")
		if assert.NoError(t, err, "HTTP from 127.0.0.%d", x+1) {
			hr.Body.Close()
			assert.Equal(t, http.StatusOK, hr.StatusCode)
		}
		assert.Less(t, time.Since(start), time.Second)
	}

	holdIdle(t, s.grpcAddr, held, from, http2Preface)
	served(200)
	holdIdle(t, strings.TrimPrefix(s.httpBase, "http://"), held, from, "")
	served(210)
	grew := rss(t, s.cmd.Process.Pid) - before
	t.Logf("memory grew by %d MB, holding %d connections of %d opened", grew>>20, s.metric(t, "keyrate_rls_connections"), 2*held)
	assert.Less(t, grew, int64(200<<20), "memory held for the connections")
	assert.Contains(t, s.log.String(), "-max-conns lowered to what the limit of open files allows")
}

// Many addresses each holding one idle connection fill the pool, and no
// address holds more than a newcomer would: a client from another address
// is still served, on the gRPC and the HTTP port, in the place of the
// connection idle longest. (Per-address fairness alone let 4,100
// addresses of one idle connection each lock every client out.)
func TestManyAddressesLockNoOneOut(t *testing.T) {
	const total, addrs = 64, 80
	s := startServer(t, binaryConfig(t), "-max-conns", strconv.Itoa(total))
	hold := func(addr string, hello string, from int) {
		t.Helper()
		for x := from; x < from+addrs; x++ {
			c, err := loopbackDialer(x).Dial("tcp", addr)
			require.NoError(t, err)
			t.Cleanup(func() { c.Close() })
			_, err = io.WriteString(c, hello)
			require.NoError(t, err)
		}
	}
	grpcFrom := func(x int) error {
		conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return loopbackDialer(x).DialContext(ctx, "tcp", addr)
			}))
		require.NoError(t, err)
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = rlspb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("d", desc("b", "newcomer")),
			grpc.WaitForReady(false))
		return err
	}
	httpFrom := func(x int) error {
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: loopbackDialer(x).DialContext}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(s.httpBase + "/healthcheck")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}

	hold(s.grpcAddr, http2Preface, 10) // 127.0.0.10 to .89, a connection each
	assert.NoError(t, grpcFrom(200), "gRPC from a new address, the pool full of idle connections")
	hold(strings.TrimPrefix(s.httpBase, "http://"), "", 100) // 127.0.0.100 to .179
	assert.NoError(t, httpFrom(201), "HTTP from a new address, the pool full of idle connections")
	assert.NoError(t, grpcFrom(202), "gRPC again")
	assert.LessOrEqual(t, s.metric(t, "keyrate_rls_connections"), total)
}

// A connection that sends no request within -conn-request-timeout of its
// accept is closed; one that sent a request stays.
func TestConnWithoutRequestIsClosed(t *testing.T) {
	s := startServer(t, binaryConfig(t), "-conn-request-timeout", "300ms")
	asked := dialRaw(t, s.grpcAddr, 23)
	asked.request(t)
	idle := dialRaw(t, s.grpcAddr, 24)
	select {
	case <-idle.closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the connection with no request is still open")
	}
	select {
	case <-asked.closed:
		t.Error("the connection that sent a request was closed")
	default:
	}
	assert.Equal(t, "OK | OK 4/5 HOUR", s.ask(t, request("d", desc("b", "after"))))
}

// writeTemp writes content to a new file and returns its path.
func writeTemp(t *testing.T, content string) string {
	t.Helper()
	path := t.TempDir() + "/rules.yaml"
	write(t, path, content)
	return path
}

// rawConn is an HTTP/2 connection to the gRPC port written frame by
// frame, so that a test can start calls whose request never completes.
type rawConn struct {
	c      net.Conn
	fr     *http2.Framer
	wmu    sync.Mutex
	next   uint32                   // the next stream's id
	mu     sync.Mutex               // guards ended
	ended  map[uint32]chan struct{} // closed when the server ends the stream
	closed chan struct{}            // closed when the server closes the connection
}

// dialRaw opens a rawConn to addr from 127.0.0.x, answering the server's
// settings and pings, and noting the streams it ends.
func dialRaw(t *testing.T, addr string, x int) *rawConn {
	t.Helper()
	c, err := loopbackDialer(x).Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	rc := &rawConn{c: c, fr: http2.NewFramer(c, c), next: 1, ended: map[uint32]chan struct{}{}, closed: make(chan struct{})}
	_, err = io.WriteString(c, http2.ClientPreface)
	require.NoError(t, err)
	require.NoError(t, rc.fr.WriteSettings())
	go func() {
		defer close(rc.closed)
		for {
			f, err := rc.fr.ReadFrame()
			if err != nil {
				return
			}
			var end uint32
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					rc.wmu.Lock()
					rc.fr.WriteSettingsAck()
					rc.wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					rc.wmu.Lock()
					rc.fr.WritePing(true, f.Data)
					rc.wmu.Unlock()
				}
			case *http2.RSTStreamFrame:
				end = f.StreamID
			case *http2.HeadersFrame:
				if f.StreamEnded() {
					end = f.StreamID
				}
			case *http2.DataFrame:
				if f.StreamEnded() {
					end = f.StreamID
				}
			}
			if end != 0 {
				rc.mu.Lock()
				if ch := rc.ended[end]; ch != nil {
					close(ch)
					delete(rc.ended, end)
				}
				rc.mu.Unlock()
			}
		}
	}()
	return rc
}

// stall starts a ShouldRateLimit call that sends its headers and the 5
// bytes that announce a message of size bytes, then partial of them,
// never the rest. It returns a channel closed when the server ends it.
func (rc *rawConn) stall(t *testing.T, size, partial int) <-chan struct{} {
	t.Helper()
	return rc.call(t, size, partial, false)
}

// call starts a ShouldRateLimit call of a message of size bytes, sending
// partial of them, and the end of the stream when end is set.
func (rc *rawConn) call(t *testing.T, size, partial int, end bool) <-chan struct{} {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "keyrate-rls"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	ended := make(chan struct{})
	rc.wmu.Lock()
	defer rc.wmu.Unlock()
	id := rc.next
	rc.next += 2
	rc.mu.Lock()
	rc.ended[id] = ended
	rc.mu.Unlock()
	require.NoError(t, rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}))
	msg := append([]byte{0, byte(size >> 24), byte(size >> 16), byte(size >> 8), byte(size)}, make([]byte, partial)...)
	for len(msg) > 0 { // in frames of the default maximum size
		n := min(len(msg), 16384)
		require.NoError(t, rc.fr.WriteData(id, end && n == len(msg), msg[:n]))
		msg = msg[n:]
	}
	return ended
}

// request sends a whole ShouldRateLimit call, an empty request, which
// the server answers with INVALID_ARGUMENT, and waits for its answer.
func (rc *rawConn) request(t *testing.T) {
	t.Helper()
	waitEnded(t, rc.call(t, 0, 0, true), "a whole call")
}

// waitEnded waits until the server ends the stream, or fails the test
// after a generous time.
func waitEnded(t *testing.T, ended <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the server did not end it", what)
	}
}

// Calls whose request never completes (headers and the first 5 bytes of
// a message; 32 connections x 128 such streams once held every in-flight
// place) neither hold an in-flight place nor lock anyone out: past
// -max-reading, each new call ends the one reading longest, and every
// honest call is served.
func TestStalledCallsLockNoOneOut(t *testing.T) {
	s := startServer(t, binaryConfig(t), "-max-in-flight", "2", "-max-reading", "4",
		"-max-streams-per-conn", "64", "-request-read-timeout", "1h")
	served := func(what string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := s.client.ShouldRateLimit(ctx, request("d", desc("b", "honest")))
		if assert.NoError(t, err, what) {
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), what)
		}
	}
	reading := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return s.metric(t, "keyrate_rls_grpc_calls_reading") == n },
			20*time.Second, 10*time.Millisecond, "%d calls reading", n)
	}
	rc := dialRaw(t, s.grpcAddr, 20)
	var stalled []<-chan struct{}
	// Three stalled calls, more than -max-in-flight: none holds a place.
	for range 3 {
		stalled = append(stalled, rc.stall(t, 100, 0))
	}
	reading(3)
	served("beside 3 stalled calls, past -max-in-flight 2")
	assert.Equal(t, 0, s.metric(t, "keyrate_rls_grpc_calls_in_flight"))
	// Nine more, past -max-reading 4: the oldest give way, in turn.
	for range 9 {
		stalled = append(stalled, rc.stall(t, 1000, 10))
	}
	for i, ended := range stalled[:8] {
		waitEnded(t, ended, fmt.Sprintf("the stalled call %d, displaced", i))
	}
	reading(4)
	served("beside 12 stalled calls, past -max-reading 4")
	waitEnded(t, stalled[8], "the stalled call the honest one displaced")
	assert.Equal(t, 3, s.metric(t, "keyrate_rls_grpc_calls_reading"))
	for i, ended := range stalled[9:] {
		select {
		case <-ended:
			t.Errorf("the stalled call %d ended: nothing displaced it", 9+i)
		default:
		}
	}
}

// A call whose request does not complete within -request-read-timeout is
// ended by the server, whatever else happens on its connection.
func TestStalledCallTimesOut(t *testing.T) {
	s := startServer(t, binaryConfig(t), "-request-read-timeout", "200ms")
	rc := dialRaw(t, s.grpcAddr, 22)
	waitEnded(t, rc.stall(t, 100, 0), "a call with 5 bytes of its message")
	waitEnded(t, rc.stall(t, 1<<20, 1<<20-1), "a call with all but a byte of a 1 MiB message")
	assert.Equal(t, "OK | OK 4/5 HOUR", s.ask(t, request("d", desc("b", "after"))))
}

// A slow Redis (every client paused for 400ms, as a saturated host is) is
// waited for by default: the call is answered, not failed with the
// UNAVAILABLE that Envoy admits unlimited.
func TestSlowRedisIsWaitedFor(t *testing.T) {
	addr := startRedis(t)
	s := startServer(t, binaryConfig(t), "-redis", addr)
	r := request("d", desc("b", "slow"))
	require.Equal(t, "OK | OK 4/5 HOUR", s.ask(t, r))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	require.NoError(t, c.ClientPause(context.Background(), 400*time.Millisecond).Err())
	start := time.Now()
	got := s.ask(t, r)
	took := time.Since(start)
	assert.Equal(t, "OK | OK 3/5 HOUR", got)
	assert.Greater(t, took, 250*time.Millisecond, "the call waited for the paused Redis")
}

// bombs are seven requests of the largest weight and limit the protocol
// carries, 2^31-1, that a client can send: a descriptor's hits_addend on
// a rule of that limit, and limit overrides of it.
func bombs() []*rlspb.RateLimitRequest {
	var rs []*rlspb.RateLimitRequest
	for i := range 7 {
		d := desc("huge", "k"+strconv.Itoa(i))
		d.HitsAddend = wrapperspb.UInt64(math.MaxInt32)
		if i%2 == 1 {
			d = desc("b", "k"+strconv.Itoa(i))
			d.HitsAddend = wrapperspb.UInt64(math.MaxInt32)
			d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: math.MaxInt32, Unit: typev3.RateLimitUnit_HOUR}
		}
		rs = append(rs, request("d", d))
	}
	return rs
}

// Seven requests of weight 2^31-1 leave the service's memory within 300 MB
// of where it was, each answered within 2s: in process, and in the local
// fallback while Redis is down. When a decision of weight n cost n
// entries, seven such requests took the service to 11.5 GB.
func TestWeightBomb(t *testing.T) {
	config := binaryConfig(t) + "\n  - key: huge\n    rate_limit: {unit: hour, requests_per_unit: 2147483647}\n"
	bomb := func(t *testing.T, s *server) {
		before := rss(t, s.cmd.Process.Pid)
		for i, r := range bombs() {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			resp, err := s.client.ShouldRateLimit(ctx, r)
			cancel()
			require.NoError(t, err, "request %d", i)
			assert.Equal(t, rlspb.RateLimitResponse_OK, resp.GetOverallCode(), "request %d: the weight fits the limit", i)
			assert.Less(t, time.Since(start), 2*time.Second, "request %d", i)
		}
		grew := rss(t, s.cmd.Process.Pid) - before
		t.Logf("memory grew by %d MB", grew>>20)
		assert.Less(t, grew, int64(300<<20), "memory grew by %d MB", grew>>20)
	}
	t.Run("InProcess", func(t *testing.T) {
		bomb(t, startServer(t, config))
	})
	t.Run("RedisFallback", func(t *testing.T) {
		addr := startRedis(t)
		s := startServer(t, config, "-redis", addr, "-redis-fallback", "1", "-redis-timeout", "100ms")
		pid := redisPID(t, addr)
		require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
		defer syscall.Kill(pid, syscall.SIGCONT)
		// The first call waits out the budget and opens the breaker; the
		// fallback decides from then on.
		s.ask(t, request("d", desc("b", "open-the-breaker")))
		bomb(t, s)
	})
}
