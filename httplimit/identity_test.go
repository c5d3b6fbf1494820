package httplimit

import (
	"errors"
	"github.com/keyrate/keyrate/clientkey"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/keyrate/keyrate"
)

func request(remote string, xff ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for _, v := range xff {
		r.Header.Add("X-Forwarded-For", v)
	}
	return r
}

func mustClientIP(t testing.TB, c IPConfig) KeyFunc {
	t.Helper()
	k, err := ClientIP(c)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const proxy = "10.0.0.1:443" // the socket of a request that came through a proxy

func TestClientIP(t *testing.T) {
	hops := func(n int) IPConfig { return IPConfig{TrustHops: n} }
	private := IPConfig{TrustProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}}
	long := strings.Repeat("198.51.100.66, ", 20000) // 300 kB a client prepended

	cases := []struct {
		name   string
		cfg    IPConfig
		remote string
		xff    []string
		want   string
	}{
		// Hop counts, with one and two addresses in the header.
		{"0 hops ignores the header", hops(0), "192.0.2.1:1234", []string{"203.0.113.9"}, "192.0.2.1"},
		{"0 hops, two addresses", hops(0), "192.0.2.1:1234", []string{"198.51.100.7, 203.0.113.9"}, "192.0.2.1"},
		{"1 hop, one address", hops(1), proxy, []string{"203.0.113.9"}, "203.0.113.9"},
		{"1 hop, two addresses: the rightmost", hops(1), proxy, []string{"198.51.100.7, 203.0.113.9"}, "203.0.113.9"},
		{"2 hops, two addresses", hops(2), proxy, []string{"198.51.100.7, 203.0.113.9"}, "198.51.100.7"},
		{"2 hops, one address: the furthest a proxy wrote", hops(2), proxy, []string{"203.0.113.9"}, "203.0.113.9"},
		{"2 hops, three addresses: the client's own is never read", hops(2), proxy, []string{"1.1.1.1, 198.51.100.7, 203.0.113.9"}, "198.51.100.7"},
		{"1 hop, no header", hops(1), proxy, nil, "10.0.0.1"},
		{"1 hop, header lines form one list", hops(1), proxy, []string{"1.1.1.1", "203.0.113.9"}, "203.0.113.9"},
		{"2 hops across lines", hops(2), proxy, []string{"1.1.1.1, 203.0.113.9", "10.0.0.2"}, "203.0.113.9"},
		{"ports and spaces", hops(2), proxy, []string{" 203.0.113.9:4711 ,\t[2001:db8::1]:80 "}, "203.0.113.9"},

		// Spoofing and garbage.
		{"client-written garbage left of the client is never read", hops(1), proxy, []string{"garbage, <script>, 203.0.113.9"}, "203.0.113.9"},
		{"garbage where the proxy writes: the socket", hops(1), proxy, []string{"1.1.1.1, unknown"}, "10.0.0.1"},
		{"empty entry where the proxy writes: the socket", hops(1), proxy, []string{"1.1.1.1, "}, "10.0.0.1"},
		{"empty header: the socket", hops(1), proxy, []string{""}, "10.0.0.1"},
		{"overlong entry: the socket", hops(1), proxy, []string{strings.Repeat("1", 200)}, "10.0.0.1"},
		{"overlong header, honest right end", hops(1), proxy, []string{long + "203.0.113.9"}, "203.0.113.9"},
		{"hostname instead of address: the socket", hops(1), proxy, []string{"example.com"}, "10.0.0.1"},
		{"IPv4 with leading zeros is not an address", hops(1), proxy, []string{"010.001.001.001"}, "10.0.0.1"},

		// IPv6: grouping, zones, brackets, IPv4-mapped.
		{"IPv6 socket grouped by /64", IPConfig{}, "[2001:db8:1:2:3:4:5:6]:443", nil, "2001:db8:1:2::/64"},
		{"IPv6 zone dropped", IPConfig{}, "[fe80::1%eth0]:443", nil, "fe80::/64"},
		{"IPv6 zone in header dropped", hops(1), proxy, []string{"fe80::1:2%25eth0"}, "fe80::/64"},
		{"bracketed IPv6 in header", hops(1), proxy, []string{"[2001:db8::7]"}, "2001:db8::/64"},
		{"IPv4-mapped socket is IPv4", IPConfig{}, "[::ffff:192.0.2.1]:443", nil, "192.0.2.1"},
		{"IPv4-mapped in header is IPv4", hops(1), proxy, []string{"::ffff:203.0.113.9"}, "203.0.113.9"},
		{"IPv6 full address with /128", IPConfig{IPv6Bits: 128}, "[2001:db8::1]:1", nil, "2001:db8::1"},
		{"IPv4 grouped by /24", IPConfig{IPv4Bits: 24}, "192.0.2.77:1", nil, "192.0.2.0/24"},
		{"RemoteAddr without port", IPConfig{}, "192.0.2.1", nil, "192.0.2.1"},

		// Trusted CIDRs, walked from the right.
		{"CIDRs: first untrusted from the right", private, proxy, []string{"198.51.100.7, 203.0.113.9, 10.0.0.2"}, "203.0.113.9"},
		{"CIDRs: spoofed trusted leftmost", private, proxy, []string{"10.9.9.9, 203.0.113.9"}, "203.0.113.9"},
		{"CIDRs: untrusted socket ignores the header", private, "203.0.113.50:1", []string{"1.2.3.4"}, "203.0.113.50"},
		{"CIDRs: all trusted, the furthest", private, proxy, []string{"10.1.1.1, 10.0.0.2"}, "10.1.1.1"},
		{"CIDRs: garbage behind a trusted proxy", private, proxy, []string{"203.0.113.9, junk, 10.0.0.2"}, "10.0.0.1"},
		{"CIDRs: IPv6 proxies", private, "[fd00::1]:443", []string{"2001:db8:5::1"}, "2001:db8:5::/64"},
		{"CIDRs: mapped prefix matches IPv4", IPConfig{TrustProxies: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")}}, proxy, []string{"203.0.113.9"}, "203.0.113.9"},
		{"CIDRs: chain longer than 32", private, proxy, []string{strings.Repeat("10.0.0.3, ", 40)}, "10.0.0.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := mustClientIP(t, c.cfg)(request(c.remote, c.xff...))
			if err != nil || got != c.want {
				t.Fatalf("key = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

func TestClientIPGroupsIPv6Hosts(t *testing.T) {
	k := mustClientIP(t, IPConfig{})
	a, _ := k(request("[2001:db8:1:2::1]:1"))
	b, _ := k(request("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"))
	c, _ := k(request("[2001:db8:1:3::1]:1"))
	if a != b || a == c {
		t.Fatalf("keys %q %q %q: want one per /64", a, b, c)
	}
}

func TestClientIPErrors(t *testing.T) {
	k := mustClientIP(t, IPConfig{})
	for _, remote := range []string{"", "@", "example.com:80", "[::1"} {
		if key, err := k(request(remote)); !errors.Is(err, errRemoteAddr) {
			t.Errorf("RemoteAddr %q: key %q, err %v; want errRemoteAddr", remote, key, err)
		}
	}
	bad := map[string]struct {
		cfg   IPConfig
		field string // the error names it
	}{
		"negative hops":  {IPConfig{TrustHops: -1}, "IPConfig.TrustHops"},
		"too many hops":  {IPConfig{TrustHops: 33}, "IPConfig.TrustHops"},
		"both":           {IPConfig{TrustHops: 1, TrustProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, "IPConfig.TrustProxies"},
		"IPv4 bits":      {IPConfig{IPv4Bits: 33}, "IPConfig.IPv4Bits"},
		"IPv6 bits":      {IPConfig{IPv6Bits: -1}, "IPConfig.IPv6Bits"},
		"invalid prefix": {IPConfig{TrustProxies: []netip.Prefix{{}}}, "IPConfig.TrustProxies[0]"},
	}
	for name, c := range bad {
		_, err := ClientIP(c.cfg)
		if !errors.Is(err, keyrate.ErrConfig) {
			t.Errorf("%s: err = %v, want keyrate.ErrConfig", name, err)
		} else if !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want it to name %s", name, err, c.field)
		}
	}
}

func TestHeaderKeyAndJoin(t *testing.T) {
	k := HeaderKey("x-api-key", nil)
	r := request("192.0.2.1:1")
	if got, _ := k(r); got != "192.0.2.1" {
		t.Errorf("no header: %q, want the address", got)
	}
	r.Header.Set("X-API-Key", "alice")
	if got, _ := k(r); got != "x-api-key=alice" {
		t.Errorf("with header: %q, want x-api-key=alice", got)
	}
	// A long value is the identity too: the middleware bounds it, as it
	// bounds any identity, rather than let it fall back to the address.
	long := strings.Repeat("a", 300)
	r.Header.Set("X-API-Key", long)
	if got, _ := k(r); got != "x-api-key="+long {
		t.Errorf("long header: %d bytes, want the header's identity", len(got))
	}
	r.Header.Set("X-API-Key", "alice")
	both := Join(HeaderKey("X-API-Key", nil), mustClientIP(t, IPConfig{}))
	if got, _ := both(r); got != "x-api-key=alice\x00192.0.2.1" {
		t.Errorf("joined: %q", got)
	}
	r.RemoteAddr = "@"
	if _, err := both(r); err == nil {
		t.Error("Join hid an error")
	}
}

// FuzzClientIP checks the parser never panics, never lets a client pick its
// key when no proxy is trusted, and with n trusted hops returns either the
// socket's key or that of one of the n rightmost entries.
func FuzzClientIP(f *testing.F) {
	seeds := []struct {
		remote, xff string
		hops        uint8
	}{
		{"192.0.2.1:1234", "203.0.113.9", 1},
		{"10.0.0.1:443", "198.51.100.7, 203.0.113.9", 2},
		{"10.0.0.1:443", "1.1.1.1,,", 1},
		{"[fe80::1%eth0]:80", "[2001:db8::1]:80, fe80::2%lo", 2},
		{"[::ffff:192.0.2.1]:1", "::ffff:1.2.3.4", 1},
		{"@", "1.2.3.4", 1},
		{"10.0.0.1:1", strings.Repeat("9", 300), 3},
		{"10.0.0.1:1", "\x00, \xff, [", 2},
	}
	for _, s := range seeds {
		f.Add(s.remote, s.xff, s.hops)
	}
	plain := mustClientIP(f, IPConfig{})
	f.Fuzz(func(t *testing.T, remote, xff string, hops uint8) {
		n := int(hops%4) + 1
		trusting := mustClientIP(t, IPConfig{TrustHops: n})
		r := request(remote, xff)
		socketKey, sockErr := plain(request(remote))

		got, err := plain(r)
		if got != socketKey || (err == nil) != (sockErr == nil) {
			t.Fatalf("0 hops: %q, %v; the socket alone gives %q, %v", got, err, socketKey, sockErr)
		}
		got, err = trusting(r)
		if (err == nil) != (sockErr == nil) {
			t.Fatalf("%d hops: err %v, socket err %v", n, err, sockErr)
		}
		if err != nil || got == socketKey {
			return
		}
		entries := strings.Split(xff, ",")
		for i := len(entries) - 1; i >= 0 && i >= len(entries)-n; i-- {
			if a, ok := parseAddr(strings.Trim(entries[i], " \t"), false); ok && plainFormat(a) == got {
				return
			}
		}
		t.Fatalf("%d hops over %q: key %q is neither the socket's nor a trusted entry's", n, xff, got)
	})
}

func plainFormat(a netip.Addr) string { return clientkey.Addr(a, 32, 64) }
