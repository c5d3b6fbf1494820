package middleware

import "testing"

// TokenTier and TokenGroup read a key's budget off its suffix.
func TestTokenTierAndGroup(t *testing.T) {
	for key, want := range map[string][2]string{
		"generate\x00alice/tokens":          {TokensTier, "generate\x00alice"},
		"generate\x00alice/requests":        {"", "generate\x00alice"},
		"generate\x00alice/tokens/requests": {"", "generate\x00alice/tokens"},
		"search\x00bob":                     {"", ""},
	} {
		if tier, group := TokenTier(key), TokenGroup(key); tier != want[0] || group != want[1] {
			t.Errorf("%q: tier %q, group %q; want %q", key, tier, group, want)
		}
	}
}
