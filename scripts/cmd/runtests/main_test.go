package main

import (
	"bytes"
	"strings"
	"testing"

)

func TestRaceSettings(t *testing.T) {
	if why, err := raceMode(t.Context(), "0"); err != nil || !strings.Contains(why, "KEYRATE_RACE=0") {
		t.Errorf("KEYRATE_RACE=0: %q, %v", why, err)
	}
	if _, err := raceMode(t.Context(), "yes"); err == nil {
		t.Error("KEYRATE_RACE=yes accepted")
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{{"-bogus"}} {
		var out, errs bytes.Buffer
		if code := run(t.Context(), args, &out, &errs); code != 2 || errs.Len() == 0 {
			t.Errorf("runtests %q = %d, stderr %q; want 2 with a message", args, code, errs.String())
		}
	}
}

func TestWithoutRaceNoModuleIsSingledOut(t *testing.T) {
	for _, m := range newPlan([]string{".", "e2e"}, false) {
		if m.Race || m.Reason != "" {
			t.Errorf("with the race detector off, module %s: %+v", m.Dir, m)
		}
	}
}
