package ratelimitfield

import "testing"

func TestAppendName(t *testing.T) {
	for _, c := range []struct{ route, policy, want string }{
		{"", "", `"default"`},
		{"search", "", `"search"`},
		{"", "day", `"day"`},
		{"search", "day", `"day"`},
		{"/pkg.S/M", "burst", `"burst"`},
		{`a"b`, "", `"a\"b"`},
		{`a"b`, `c\d`, `"c\\d"`},
		{"r\x00", "\xffp", `"?p"`},
		{"r\x00", "", `"r?"`},
	} {
		if got := string(AppendName([]byte("x"), c.route, c.policy)); got != "x"+c.want {
			t.Errorf("AppendName(%q, %q) = %s, want %s", c.route, c.policy, got[1:], c.want)
		}
	}
}

func TestAppendStringAndPrintable(t *testing.T) {
	for _, c := range []struct {
		in, want  string
		printable bool
	}{
		{"content-bytes", `"content-bytes"`, true},
		{"", `""`, true},
		{`a"b\c`, `"a\"b\\c"`, true},
		{"a\nb", `"a?b"`, false},
		{"é", `"??"`, false},
	} {
		if got := string(AppendString(nil, c.in)); got != c.want {
			t.Errorf("AppendString(%q) = %s, want %s", c.in, got, c.want)
		}
		if got := Printable(c.in); got != c.printable {
			t.Errorf("Printable(%q) = %v, want %v", c.in, got, c.printable)
		}
	}
}
