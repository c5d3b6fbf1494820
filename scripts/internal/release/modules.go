// Package release knows the repository's Go modules as a consumer sees them:
// which modules are released, how they require each other, which tags
// release them, and whether they install from a module proxy with none of
// the repository's local wiring.
package release

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// Tooling lists the directories whose modules serve the repository itself
// and are never released (tagged or fetched by users).
var Tooling = []string{"scripts"}

// Module is one module of the repository.
type Module struct {
	Dir  string // slash-separated, relative to the repository root; "." for the root
	Path string // module path
	File *modfile.File
}

// Tag is the git tag that releases m at version: the version itself for the
// root module, else prefixed with the module's directory, as the go command
// looks it up.
func (m Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// Discover finds every released module under root: each directory holding a
// go.mod, outside hidden, testdata and vendor directories and the Tooling
// ones. The root module comes first, then the others by directory. Each
// module's path must be the root's path followed by its directory, or no
// tag could ever name it.
func Discover(root string) ([]Module, error) {
	mods, err := find(root, false)
	if err != nil {
		return nil, err
	}
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("%s: no go.mod at the repository root", root)
	}
	for _, m := range mods[1:] {
		if want := mods[0].Path + "/" + m.Dir; m.Path != want {
			return nil, fmt.Errorf("%s/go.mod: module %s, want %s: the go command finds a sub-module's tags by its directory", m.Dir, m.Path, want)
		}
	}
	return mods, nil
}

// All finds every module under root, the released ones and the Tooling
// ones: all that the repository's tests run in. The root module comes
// first, then the others by directory.
func All(root string) ([]Module, error) {
	return find(root, true)
}

func find(root string, tooling bool) ([]Module, error) {
	var mods []Module
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				name == "testdata" || name == "vendor" || !tooling && slices.Contains(Tooling, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		if f.Module == nil {
			return fmt.Errorf("%s: no module line", p)
		}
		mods = append(mods, Module{Dir: path.Dir(rel), Path: f.Module.Mod.Path, File: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods, func(a, b Module) int {
		switch {
		case a.Dir == b.Dir:
			return 0
		case a.Dir == ".":
			return -1
		case b.Dir == ".":
			return 1
		}
		return strings.Compare(a.Dir, b.Dir)
	})
	return mods, nil
}
