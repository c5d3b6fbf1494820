package main

import (
	"testing"
	"time"
)

func TestParsePolicy(t *testing.T) {
	cases := []struct {
		field  string
		limit  int
		window time.Duration
		ok     bool
	}{
		{`"status";q=3;w=60`, 3, time.Minute, true},
		{`"search";w=10;q=20`, 20, 10 * time.Second, true},
		{`"a";q=5;w=10, "b";q=100;w=3600`, 5, 10 * time.Second, true},
		{`"a"; q=5; w=10`, 5, 10 * time.Second, true},
		{`"a";q=5;w=10;pk=:YWJj:`, 5, 10 * time.Second, true},
		{``, 0, 0, false},
		{`"a"`, 0, 0, false},
		{`"a";q=5`, 5, 0, false},
		{`"a";w=10`, 0, 10 * time.Second, false},
		{`"a";q=0;w=10`, 0, 10 * time.Second, false},
		{`"a";q=-1;w=10`, 0, 10 * time.Second, false},
		{`"a";q=five;w=10`, 0, 10 * time.Second, false},
		{`"a";q=5;w=99999999999999999999`, 5, 0, false},
	}
	for _, c := range cases {
		limit, window, ok := parsePolicy(c.field)
		if limit != c.limit || window != c.window || ok != c.ok {
			t.Errorf("parsePolicy(%q) = %d, %v, %v; want %d, %v, %v", c.field, limit, window, ok, c.limit, c.window, c.ok)
		}
	}
}
