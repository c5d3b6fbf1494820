package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeTree creates files (slash-separated names) under a new directory.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, text := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func goMod(path string, lines ...string) string {
	return "module " + path + "\n\ngo 1.26\n" + strings.Join(lines, "\n") + "\n"
}

const base = "example.com/repo"

// wired is a repository laid out as this one: a core, a backend requiring
// it, a nested module requiring both, and a command requiring nothing of
// them.
func wired() map[string]string {
	return map[string]string{
		"go.mod":                 goMod(base),
		"store/go.mod":           goMod(base+"/store", "require "+base+" v0.1.0", "replace "+base+" => ../"),
		"store/bench/go.mod":     goMod(base+"/store/bench", "require (\n\t"+base+" v0.1.0 // indirect\n\t"+base+"/store v0.1.0\n)", "replace (\n\t"+base+" => ../..\n\t"+base+"/store => ../\n)"),
		"cmd/load/go.mod":        goMod(base+"/cmd/load", "require example.com/other v1.2.3"),
		".hidden/go.mod":         goMod("example.com/hidden"),
		"store/testdata/go.mod":  goMod("example.com/fixture"),
		"scripts/go.mod":         goMod(base+"/scripts", "replace example.com/other => ../other"),
		"_archive/go.mod":        goMod("example.com/archive"),
		"vendor/example/go.mod":  goMod("example.com/vendored"),
		"cmd/load/main.go":       "package main\n",
		"store/bench/nothing.go": "package bench\n",
	}
}

func discover(t *testing.T, files map[string]string) []Module {
	t.Helper()
	mods, err := Discover(writeTree(t, files))
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

func dirs(mods []Module) []string {
	var out []string
	for _, m := range mods {
		out = append(out, m.Dir)
	}
	return out
}

func TestDiscoverFindsReleasedModules(t *testing.T) {
	mods := discover(t, wired())
	if got, want := dirs(mods), []string{".", "cmd/load", "store", "store/bench"}; !slices.Equal(got, want) {
		t.Errorf("Discover found %q, want %q (hidden, testdata, vendor, _ and tooling directories left out)", got, want)
	}
	if mods[2].Path != base+"/store" {
		t.Errorf("module in store has path %q", mods[2].Path)
	}
}

func TestDiscoverRefusesAPathThatIsNotItsDirectory(t *testing.T) {
	files := wired()
	files["store/go.mod"] = goMod(base + "/redis")
	_, err := Discover(writeTree(t, files))
	if err == nil || !strings.Contains(err.Error(), "want "+base+"/store") {
		t.Errorf("Discover = %v, want an error naming the expected path", err)
	}
	delete(files, "go.mod")
	if _, err := Discover(writeTree(t, files)); err == nil {
		t.Error("Discover without a root go.mod succeeded")
	}
}

func TestVersion(t *testing.T) {
	if v, err := Version(discover(t, wired())); v != "v0.1.0" || err != nil {
		t.Errorf("Version = %q, %v; want v0.1.0", v, err)
	}
	for name, require := range map[string]string{
		"pseudo-version":  "v0.0.0-00010101000000-000000000000",
		"prerelease":      "v0.1.0-rc.1",
		"another release": "v0.2.0",
	} {
		t.Run(name, func(t *testing.T) {
			files := wired()
			files["store/go.mod"] = goMod(base+"/store", "require "+base+" "+require, "replace "+base+" => ../")
			_, err := Version(discover(t, files))
			if err == nil || !strings.Contains(err.Error(), require) {
				t.Errorf("Version = %v, want an error naming %s", err, require)
			}
		})
	}
	_, err := Version(discover(t, map[string]string{"go.mod": goMod(base)}))
	if err == nil {
		t.Error("Version with no requirement between modules succeeded")
	}
}

func TestCheckWiring(t *testing.T) {
	if err := CheckWiring(discover(t, wired())); err != nil {
		t.Errorf("CheckWiring on a wired repository: %v", err)
	}
	cases := map[string]struct{ goMod, want string }{
		"no replace": {
			goMod(base+"/store", "require "+base+" v0.1.0"),
			"store/go.mod requires " + base + " without replacing it with ..",
		},
		"replace with another directory": {
			goMod(base+"/store", "require "+base+" v0.1.0", "replace "+base+" => ../store"),
			"which is not its directory ..",
		},
		"replace with a version": {
			goMod(base+"/store", "require "+base+" v0.1.0", "replace "+base+" => "+base+" v0.0.9"),
			"want its directory ..",
		},
		"replace of a module outside the repository": {
			goMod(base+"/store", "require "+base+" v0.1.0", "replace (\n\t"+base+" => ../\n\texample.com/other => ../other\n)"),
			"replaces example.com/other, which is not a module of this repository",
		},
		"replace without a requirement": {
			goMod(base+"/store", "replace "+base+" => ../"),
			"replaces " + base + " but does not require it",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			files := wired()
			files["store/go.mod"] = c.goMod
			err := CheckWiring(discover(t, files))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("CheckWiring = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestOrderPutsRequirementsFirst(t *testing.T) {
	files := wired()
	// A module that sorts before store but requires it.
	files["a/go.mod"] = goMod(base+"/a", "require "+base+"/store v0.1.0", "replace "+base+"/store => ../store")
	mods, err := Order(discover(t, files))
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, m := range mods {
		tags = append(tags, m.Tag("v0.1.0"))
	}
	want := []string{"v0.1.0", "cmd/load/v0.1.0", "store/v0.1.0", "store/bench/v0.1.0", "a/v0.1.0"}
	if !slices.Equal(tags, want) {
		t.Errorf("tags in order %q, want %q", tags, want)
	}

	files["go.mod"] = goMod(base, "require "+base+"/a v0.1.0")
	if _, err := Order(discover(t, files)); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Errorf("Order with a cycle = %v, want an error", err)
	}
}

func TestRel(t *testing.T) {
	for _, c := range [][3]string{
		{"store", ".", ".."},
		{"store/bench", ".", "../.."},
		{"store/bench", "store", ".."},
		{".", "store", "./store"},
		{"cmd/load", "store/bench", "../../store/bench"},
		{"store", "store", "."},
	} {
		if got := rel(c[0], c[1]); got != c[2] {
			t.Errorf("rel(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

func TestAllAddsTooling(t *testing.T) {
	mods, err := All(writeTree(t, wired()))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dirs(mods), []string{".", "cmd/load", "scripts", "store", "store/bench"}; !slices.Equal(got, want) {
		t.Errorf("All found %q, want %q", got, want)
	}
}
