package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

func TestTagsComeCoreFirst(t *testing.T) {
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"-root", "../../..", "-tags"}, &out, &errs); code != 0 {
		t.Fatalf("release -tags = %d: %s", code, errs.String())
	}
	tags := strings.Fields(out.String())
	if len(tags) < 2 || tags[0] != "v0.1.0" {
		t.Fatalf("tags %q, want the core's v0.1.0 first", tags)
	}
	redis := slices.Index(tags, "redislimit/v0.1.0")
	bench := slices.Index(tags, "redislimit/benchcmp/v0.1.0")
	if redis < 0 || bench < redis {
		t.Errorf("tags %q, want redislimit/v0.1.0 before redislimit/benchcmp/v0.1.0, which requires it", tags)
	}
	if slices.ContainsFunc(tags, func(t string) bool { return strings.HasPrefix(t, "scripts/") }) {
		t.Errorf("tags %q include the tooling module", tags)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"-bogus"}, {"extra"}} {
		var out, errs bytes.Buffer
		if code := run(t.Context(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("release %q = %d, stderr %q; want 2 with a message", args, code, errs.String())
		}
	}
	var out, errs bytes.Buffer
	if code := run(t.Context(), []string{"-root", t.TempDir(), "-tags"}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "no go.mod") {
		t.Errorf("release -tags outside a repository = %d, stderr %q", code, errs.String())
	}
}
