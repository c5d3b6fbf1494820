package release

import (
	"bytes"
	"path/filepath"
	"slices"
	"testing"
)

// TestInstallFromProxy is the release as a user meets it: every module of
// this repository, served at its release version by a module proxy, installs
// into a module outside the repository with none of the local wiring;
// keyrate-load installs with go install pkg@version, and keyrate-demo is
// listed as a command to run from a clone.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every module as a consumer would; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	in, err := CheckInstall(t.Context(), root, t.TempDir(), &log)
	if err != nil {
		t.Fatalf("%v\n\n%s", err, log.String())
	}
	t.Logf("version %s; go install works for %q; from a clone only: %q", in.Version, in.Commands, in.FromClone)
	for _, want := range []string{"github.com/keyrate/keyrate/cmd/keyrate-load"} {
		if !slices.Contains(in.Commands, want) {
			t.Errorf("%s did not install with go install pkg@%s:\n%s", want, in.Version, log.String())
		}
	}
	// The demo's module requires its siblings through replace directives,
	// which go install pkg@version refuses: it runs from a clone.
	for _, want := range []string{"github.com/keyrate/keyrate/cmd/keyrate-demo"} {
		if !slices.Contains(in.FromClone, want) {
			t.Errorf("%s is not listed as a command to run from a clone (from a clone: %q; installed: %q)", want, in.FromClone, in.Commands)
		}
	}
}
