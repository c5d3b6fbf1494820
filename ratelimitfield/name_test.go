package ratelimitfield

import "testing"

func TestAppendName(t *testing.T) {
	for _, c := range []struct{ policy, route, want string }{
		{"", "", `"default"`},
		{"", "search", `"search"`},
		{"day", "", `"day"`},
		{"day", "search", `"day"`},
		{"burst", "/pkg.S/M", `"burst"`},
		{"", `a"b`, `"a\"b"`},
		{`c\d`, `a"b`, `"c\\d"`},
		{"\xffp", "r\x00", `"?p"`},
		{"", "r\x00", `"r?"`},
	} {
		if got := string(AppendName([]byte("x"), c.policy, c.route)); got != "x"+c.want {
			t.Errorf("AppendName(%q, %q) = %s, want %s", c.policy, c.route, got[1:], c.want)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"content-bytes", `"content-bytes"`},
		{"", `""`},
		{`a"b\c`, `"a\"b\\c"`},
		{"a\nb", `"a?b"`},
		{"é", `"??"`},
	} {
		if got := string(appendString(nil, c.in)); got != c.want {
			t.Errorf("appendString(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}
