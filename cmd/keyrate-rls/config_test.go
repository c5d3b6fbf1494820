package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Every fixture, written out from envoyproxy/ratelimit's documented
// examples or keyrate's extensions, loads.
func TestFixturesLoad(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rs, err := parseConfig(f, data)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if len(rs.domains) != 1 || len(rs.rules) == 0 {
			t.Errorf("%s: %d domains, %d rules", f, len(rs.domains), len(rs.rules))
		}
	}
}

// A file may hold several domains, one YAML document each; values and keys
// written as numbers are read as their digits.
func TestParseDocumentsAndScalars(t *testing.T) {
	rs, err := parseConfig("rules.yaml", []byte(`
domain: one
descriptors:
  - key: port
    value: 500
    rate_limit: {unit: SECOND, requests_per_unit: 1, name: five-hundred}
---
domain: two
descriptors:
  - key: 7
    rate_limit: {window: 90s, requests_per_unit: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := rs.match("one", desc("port", "500").Entries)
	if r == nil || r.limits[0].name != "five-hundred" || r.limits[0].window != time.Second || r.stat != "port_500" {
		t.Errorf("domain one: %+v", r)
	}
	r, _ = rs.match("two", desc("7", "x").Entries)
	if r == nil || r.limits[0].window != 90*time.Second || r.limits[0].unit != rlspb.RateLimitResponse_RateLimit_SECOND ||
		r.limits[0].multiplier != 90 || r.line != 11 {
		t.Errorf("domain two: %+v", r)
	}
}

// A block may be written once and reused through a YAML alias.
func TestParseAliases(t *testing.T) {
	rs, err := parseConfig("rules.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: &standard {unit: minute, requests_per_unit: 7}
  - key: b
    rate_limit: *standard
  - key: c
    descriptors: &nested
      - key: x
        rate_limit: *standard
  - key: e
    descriptors: *nested
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, entries := range [][]string{{"a", "1"}, {"b", "1"}, {"c", "1", "x", "2"}, {"e", "1", "x", "2"}} {
		r, _ := rs.match("d", desc(entries...).Entries)
		if r == nil || r.limits[0].perUnit != 7 || r.limits[0].window != time.Minute {
			t.Errorf("%v: %+v", entries, r)
		}
	}
}

func TestUnitOf(t *testing.T) {
	for _, c := range []struct {
		window time.Duration
		unit   rlspb.RateLimitResponse_RateLimit_Unit
		mult   uint32
	}{
		{time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 1},
		{3 * time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 3},
		{90 * time.Second, rlspb.RateLimitResponse_RateLimit_SECOND, 90},
		{2 * time.Minute, rlspb.RateLimitResponse_RateLimit_MINUTE, 2},
		{time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR, 1},
		{36 * time.Hour, rlspb.RateLimitResponse_RateLimit_HOUR, 36},
		{48 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY, 2},
		{7 * 24 * time.Hour, rlspb.RateLimitResponse_RateLimit_DAY, 7},
		{1500 * time.Millisecond, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1},
		{100 * time.Millisecond, rlspb.RateLimitResponse_RateLimit_UNKNOWN, 1},
	} {
		unit, mult := unitOf(c.window)
		if unit != c.unit || mult != c.mult {
			t.Errorf("unitOf(%v) = %v x %d, want %v x %d", c.window, unit, mult, c.unit, c.mult)
		}
	}
}

// Every invalid file is refused with an error naming the file and line of
// the problem, and never quoting a descriptor value.
func TestConfigErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"yaml syntax", "domain: d\ndescriptors:\n  - key: [\n", "rules.yaml: yaml: line 3"},
		{"empty file", "", "rules.yaml: no domain: the file is empty"},
		{"comments only", "# domain: d\n", "rules.yaml: no domain: the file is empty"},
		{"empty documents", "---\n---\n", "rules.yaml: no domain: the file is empty"},
		{"a scalar", "domain\n", "rules.yaml:1: top level: want a mapping, found a scalar"},
		{"missing domain", "descriptors: []\n", "rules.yaml:1: domain is missing"},
		{"empty domain", "domain: ''\n", "rules.yaml:1: domain is empty"},
		{"duplicate domain", "domain: d\n---\ndomain: d\n", `rules.yaml:3: domain "d" is given twice (first at line 1)`},
		{"unknown top field", "domain: d\nrules: []\n", `rules.yaml:2: top level: unknown field "rules"`},
		{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", "rules.yaml:2: descriptors: want a list, found a mapping"},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n", `rules.yaml:4: descriptor: unknown field "rate_limt"`},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", "rules.yaml:3: descriptor: key is missing"},
		{"empty key", "domain: d\ndescriptors:\n  - key: ''\n", "rules.yaml:3: descriptor: key is empty"},
		{"key twice", "domain: d\ndescriptors:\n  - key: k\n    key: j\n", "rules.yaml:4: descriptor: field key given twice"},
		{"duplicate descriptor", "domain: d\ndescriptors:\n  - key: api_key\n    value: sk-secret\n  - key: api_key\n    value: sk-secret\n",
			`rules.yaml:5: descriptor: key "api_key" with the same value is given twice at this level (first at line 3)`},
		{"bad unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
			`rules.yaml:5: rate_limit: unit "fortnight", want second, minute, hour, day, week, month or year`},
		{"missing unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      requests_per_unit: 1\n",
			"rules.yaml:5: rate_limit: unit (or window) is missing"},
		{"unit and window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      window: 3s\n      requests_per_unit: 1\n",
			"rules.yaml:6: rate_limit: give unit or window, not both"},
		{"bad window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 3 seconds, requests_per_unit: 1}\n",
			`rules.yaml:4: rate_limit: window "3 seconds", want a positive duration`},
		{"negative window", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: -3s, requests_per_unit: 1}\n",
			`rules.yaml:4: rate_limit: window "-3s", want a positive duration`},
		{"missing requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n",
			"rules.yaml:5: rate_limit: requests_per_unit is missing"},
		{"requests_per_unit too large", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967295\n",
			`rules.yaml:6: rate_limit: requests_per_unit "4294967295", want a whole number from 0 to 2147483647`},
		{"requests_per_unit negative", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n",
			`rules.yaml:4: rate_limit: requests_per_unit "-1"`},
		{"requests_per_unit text", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: ten}\n",
			`rules.yaml:4: rate_limit: requests_per_unit "ten"`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"rules.yaml:5: rate_limit: an unlimited limit takes no unit or window"},
		{"unlimited not a bool", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: yes please}\n",
			"rules.yaml:4: rate_limit.unlimited: want true or false"},
		{"both blocks", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limits: []\n",
			"rules.yaml:5: descriptor: give rate_limit or rate_limits, not both"},
		{"empty rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n",
			"rules.yaml:4: rate_limits: want a list of 1 to 4 limits"},
		{"five limits", `domain: d
descriptors:
  - key: k
    rate_limits:
      - {name: a, unit: second, requests_per_unit: 1}
      - {name: b, unit: minute, requests_per_unit: 2}
      - {name: c, unit: hour, requests_per_unit: 3}
      - {name: e, unit: day, requests_per_unit: 4}
      - {name: f, unit: week, requests_per_unit: 5}
`, "rules.yaml:9: rate_limits: 5 limits, want at most 4"},
		{"unnamed limit among several", `domain: d
descriptors:
  - key: k
    rate_limits:
      - {name: a, unit: second, requests_per_unit: 1}
      - {unit: minute, requests_per_unit: 2}
`, "rules.yaml:6: rate_limits[1]: name is missing: each of several limits needs a name of its own"},
		{"repeated limit name", `domain: d
descriptors:
  - key: k
    rate_limits:
      - {name: a, unit: second, requests_per_unit: 1}
      - {name: a, unit: minute, requests_per_unit: 2}
`, `rules.yaml:6: rate_limits[1]: name "a" is already that of the limit at line 5`},
		{"unlimited among several", `domain: d
descriptors:
  - key: k
    rate_limits:
      - {name: a, unit: second, requests_per_unit: 1}
      - {name: b, unlimited: true}
`, "rules.yaml:6: rate_limits[1]: an unlimited limit must be the descriptor's only one"},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n",
			"rules.yaml:5: share_threshold: only a value with a wildcard (*) can share its threshold"},
		{"quota_mode not a bool", "domain: d\ndescriptors:\n  - key: k\n    quota_mode: sometimes\n", "rules.yaml:4: quota_mode: want true or false"},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n", "rules.yaml:4: metadata: want a mapping, found a list"},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: n}]\n",
			`rules.yaml:8: rate_limit.replaces: a limit cannot replace itself ("n")`},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{}]\n",
			"rules.yaml:7: rate_limit.replaces: name is missing"},
		{"nested error", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: eon, requests_per_unit: 1}\n",
			`rules.yaml:6: rate_limit: unit "eon"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parseConfig("rules.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatalf("no error, want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error:\n%v\nwant it to contain:\n%s", err, c.want)
			}
			if strings.Contains(err.Error(), "sk-secret") {
				t.Errorf("the error quotes a descriptor value: %v", err)
			}
		})
	}
}

// Every problem of a file is reported, each on its line, not only the first.
func TestConfigErrorsAll(t *testing.T) {
	_, err := parseConfig("rules.yaml", []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: fortnight, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: second, requests_per_unit: -5}
`))
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:4:") || !strings.Contains(err.Error(), "rules.yaml:6:") {
		t.Fatalf("got %v, want errors at lines 4 and 6", err)
	}
}
