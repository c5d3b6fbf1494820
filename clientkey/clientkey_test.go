package clientkey

import (
	"net/netip"
	"strings"
	"testing"
)

func TestBoundKeepsShortIdentities(t *testing.T) {
	for _, id := range []string{"", "a", "x-api-key=abc", strings.Repeat("k", MaxLen)} {
		if got := Bound(id); got != id {
			t.Errorf("Bound(%d bytes) = %q, want it unchanged", len(id), got)
		}
	}
}

func TestBoundHashesLongIdentities(t *testing.T) {
	long := strings.Repeat("k", MaxLen+1)
	huge := strings.Repeat("k", 64<<10)
	seen := map[string]int{}
	for _, id := range []string{long, huge, long + "x", "x" + long, hashed + "abc"} {
		got := Bound(id)
		if !strings.HasPrefix(got, hashed) || len(got) != len(hashed)+43 {
			t.Errorf("Bound(%d bytes) = %q, want sha256: and 43 base64url characters", len(id), got)
		}
		if got != Bound(id) {
			t.Errorf("Bound(%d bytes) is not stable", len(id))
		}
		seen[got]++
	}
	if len(seen) != 5 {
		t.Errorf("5 distinct identities gave %d distinct keys", len(seen))
	}
	// A client cannot pick a short identity equal to another's digest.
	if d := Bound(long); Bound(d) == d {
		t.Errorf("Bound(Bound(x)) == Bound(x): a digest sent as an identity would share x's budget")
	}
}

func TestAddr(t *testing.T) {
	cases := []struct {
		in     string
		v4, v6 int
		want   string
	}{
		{"192.0.2.1", 32, 64, "192.0.2.1"},
		{"::ffff:192.0.2.1", 32, 64, "192.0.2.1"},
		{"2001:db8:1:2:3:4:5:6", 32, 64, "2001:db8:1:2::/64"},
		{"fe80::1%eth0", 32, 128, "fe80::1"},
		{"192.0.2.77", 24, 64, "192.0.2.0/24"},
		{"192.0.2.77", 40, 64, "192.0.2.77"},
		{"192.0.2.77", -1, 64, "0.0.0.0/0"},
		{"2001:db8:1:2:3:4:5:6", 32, 200, "2001:db8:1:2:3:4:5:6"},
	}
	for _, c := range cases {
		if got := Addr(netip.MustParseAddr(c.in), c.v4, c.v6); got != c.want {
			t.Errorf("Addr(%s, %d, %d) = %q, want %q", c.in, c.v4, c.v6, got, c.want)
		}
		if got := AppendAddr([]byte("route\x00"), netip.MustParseAddr(c.in), c.v4, c.v6); string(got) != "route\x00"+c.want {
			t.Errorf("AppendAddr(route, %s, %d, %d) = %q, want the route and %q", c.in, c.v4, c.v6, got, c.want)
		}
	}
	if got := Addr(netip.Addr{}, 32, 64); got != "" {
		t.Errorf("Addr of the zero Addr = %q, want \"\"", got)
	}
}
