package clientkey_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/keyrate/keyrate/clientkey"
)

// An identity of up to 128 bytes is its own key; a longer one, or one that
// poses as a digest, is its SHA-256 digest.
func ExampleBound() {
	fmt.Println(clientkey.Bound("x-api-key=alice"))
	long := clientkey.Bound("x-api-key=" + strings.Repeat("k", 200))
	fmt.Println(long, len(long))
	fmt.Println(clientkey.Bound(long) == long)
	// Output:
	// x-api-key=alice
	// sha256:OkPTLabFK0-VIwtDcK_gB_G9KE2jmMvap71hZ4VO3PY 50
	// false
}

// IPv4 clients are keyed by address, IPv6 ones by their /64: a host that
// picks a new address in its network keeps its key.
func ExampleAddr() {
	for _, s := range []string{"192.0.2.1", "::ffff:192.0.2.1", "2001:db8:1:2::1", "2001:db8:1:2:ffff::9"} {
		fmt.Println(clientkey.Addr(netip.MustParseAddr(s), 32, 64))
	}
	// Output:
	// 192.0.2.1
	// 192.0.2.1
	// 2001:db8:1:2::/64
	// 2001:db8:1:2::/64
}
