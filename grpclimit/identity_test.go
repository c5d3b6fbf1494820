package grpclimit

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/httplimit"
	"github.com/keyrate/keyrate/middleware"
)

func TestIdentity(t *testing.T) {
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }
	withPeer := func(a net.Addr) context.Context {
		return peer.NewContext(context.Background(), &peer.Peer{Addr: a})
	}
	withMD := func(ctx context.Context, kv ...string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	plain := &Limiter{}
	keyed := &Limiter{config: config{mdKey: "x-api-key"}}
	v4 := withPeer(tcp("192.0.2.1"))
	for _, tc := range []struct {
		name string
		l    *Limiter
		ctx  context.Context
		want string
		sent string // "": want
	}{
		{"IPv4", plain, v4, "192.0.2.1", ""},
		{"IPv4 in a 16-byte net.IP", plain, withPeer(&net.TCPAddr{IP: net.ParseIP("192.0.2.1").To16()}), "192.0.2.1", ""},
		{"IPv4-mapped IPv6", plain, withPeer(tcp("::ffff:192.0.2.1")), "192.0.2.1", ""},
		{"IPv6 grouped by /64", plain, withPeer(tcp("2001:db8:1:2:3:4:5:6")), "2001:db8:1:2::/64", ""},
		{"IPv6 zone dropped", plain, withPeer(&net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}), "fe80::/64", ""},
		{"an address that is not a TCPAddr", plain, withPeer(&net.UDPAddr{IP: net.ParseIP("192.0.2.9"), Port: 1}), "192.0.2.9", ""},
		{"Unix socket", plain, withPeer(&net.UnixAddr{Name: "/run/app.sock", Net: "unix"}), "unix:/run/app.sock", ""},
		{"no peer", plain, context.Background(), "unknown", ""},
		{"metadata key", keyed, withMD(v4, "x-api-key", "alice"), "x-api-key=alice", "alice"},
		{"metadata key, first value", keyed, withMD(v4, "x-api-key", "alice", "x-api-key", "bob"), "x-api-key=alice", "alice"},
		{"metadata key absent", keyed, withMD(v4, "other", "alice"), "192.0.2.1", ""},
		{"metadata key empty", keyed, withMD(v4, "x-api-key", ""), "192.0.2.1", ""},
		{"metadata ignored without the option", plain, withMD(v4, "x-api-key", "alice"), "192.0.2.1", ""},
	} {
		if tc.sent == "" {
			tc.sent = tc.want
		}
		if got, sent := tc.l.identity(tc.ctx); got != tc.want || sent != tc.sent {
			t.Errorf("%s: identity %q, sent as %q; want %q, %q", tc.name, got, sent, tc.want, tc.sent)
		}
	}

	// Identities over 128 bytes are hashed whole, name included: bounded,
	// and never equal to another client's, nor to a digest sent as a value.
	long := strings.Repeat("k", 1000)
	a, sent := keyed.identity(withMD(v4, "x-api-key", long))
	b, _ := keyed.identity(withMD(v4, "x-api-key", long+"x"))
	c, _ := keyed.identity(withMD(v4, "x-api-key", a))
	if !strings.HasPrefix(a, "sha256:") || len(a) != 50 || a == b || c == a {
		t.Errorf("long identities: %q, %q, and the first's digest sent as a value: %q", a, b, c)
	}
	// The tier function still sees the value as sent.
	if sent != long {
		t.Errorf("a long identity is sent as %d bytes, want the value's 1000", len(sent))
	}
}

// An API key gets the same identity from grpclimit's metadata key as from
// httplimit's header of the same name, whatever its length: one format,
// one bound.
func TestIdentityMatchesHTTP(t *testing.T) {
	l, err := keyrate.New(1000, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var httpIdentity string
	m, err := httplimit.New(l, httplimit.WithKeyFunc(httplimit.HeaderKey("X-Api-Key", nil)),
		httplimit.WithOnDecision(func(ev middleware.Event) { httpIdentity = ev.Identity }))
	if err != nil {
		t.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	keyed := &Limiter{config: config{mdKey: "x-api-key"}}
	for _, value := range []string{"alice", strings.Repeat("k", 118), strings.Repeat("k", 119), strings.Repeat("k", 1000), "sha256:abc"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Api-Key", value)
		h.ServeHTTP(httptest.NewRecorder(), r)
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", value))
		if got, _ := keyed.identity(ctx); got != httpIdentity || got == "" {
			t.Errorf("a %d-byte key: grpclimit's identity %q, httplimit's %q", len(value), got, httpIdentity)
		}
	}
}

func TestValidNames(t *testing.T) {
	for name, want := range map[string]bool{
		"x-api-key": true, "tenant_id.v2": true, "auth-bin": true,
		"": false, "api key": false, "X-Api-Key": false, "grpc-timeout": false, ":authority": false,
	} {
		if got := validMetadataKey(name); got != want {
			t.Errorf("validMetadataKey(%q) = %v, want %v", name, got, want)
		}
	}
	for m, want := range map[string]bool{
		"/pkg.S/M": true, "/S/M": true,
		"": false, "/": false, "/S": false, "S/M": false, "/S/": false, "//M": false, "/S /M": false, "/S/\x7f": false,
	} {
		if got := validMethod(m); got != want {
			t.Errorf("validMethod(%q) = %v, want %v", m, got, want)
		}
	}
}
