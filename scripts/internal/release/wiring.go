package release

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Version returns the release version the modules require each other at.
// Every requirement of one module on another must name the same version, a
// real release (vX.Y.Z), so that a consumer's go command can fetch it; with
// no such requirement at all there is nothing to learn it from and Version
// fails.
func Version(mods []Module) (string, error) {
	byPath := index(mods)
	var version string
	var errs []error
	for _, m := range mods {
		for _, r := range m.File.Require {
			if _, ok := byPath[r.Mod.Path]; !ok {
				continue
			}
			v := r.Mod.Version
			switch {
			case !semver.IsValid(v) || semver.Prerelease(v) != "" || semver.Build(v) != "" || semver.Canonical(v) != v:
				errs = append(errs, fmt.Errorf("%s requires %s %s: want a release version such as v0.1.0", m.Path, r.Mod.Path, v))
			case version == "":
				version = v
			case v != version:
				errs = append(errs, fmt.Errorf("%s requires %s %s, another module requires %s: release every module at one version", m.Path, r.Mod.Path, v, version))
			}
		}
	}
	if version == "" && len(errs) == 0 {
		errs = append(errs, errors.New("no module requires another, so there is no release version to check"))
	}
	return version, errors.Join(errs...)
}

// CheckWiring reports local wiring that would not survive a release: a
// module that requires a sibling must replace it with the sibling's
// directory (consumers ignore replace directives, so this only serves work
// inside the repository), and may replace nothing else, since a consumer
// would then build against something the tests never saw.
func CheckWiring(mods []Module) error {
	byPath := index(mods)
	var errs []error
	for _, m := range mods {
		required := map[string]bool{}
		for _, r := range m.File.Require {
			if _, ok := byPath[r.Mod.Path]; ok {
				required[r.Mod.Path] = true
			}
		}
		replaced := map[string]bool{}
		for _, r := range m.File.Replace {
			errs = append(errs, checkReplace(m, r, byPath, required))
			replaced[r.Old.Path] = true
		}
		for _, r := range m.File.Require {
			if p := r.Mod.Path; required[p] && !replaced[p] {
				errs = append(errs, fmt.Errorf("%s/go.mod requires %s without replacing it with %s: it would build against a published version instead of this checkout",
					m.Dir, p, rel(m.Dir, byPath[p].Dir)))
			}
		}
	}
	return errors.Join(errs...)
}

func checkReplace(m Module, r *modfile.Replace, byPath map[string]Module, required map[string]bool) error {
	sibling, ok := byPath[r.Old.Path]
	switch {
	case !ok:
		return fmt.Errorf("%s/go.mod replaces %s, which is not a module of this repository: consumers ignore replace directives and would build with another version than the tests did", m.Dir, r.Old.Path)
	case !required[r.Old.Path]:
		return fmt.Errorf("%s/go.mod replaces %s but does not require it: remove the replace", m.Dir, r.Old.Path)
	case r.New.Version != "" || !modfile.IsDirectoryPath(r.New.Path):
		return fmt.Errorf("%s/go.mod replaces %s with %s %s, want its directory %s", m.Dir, r.Old.Path, r.New.Path, r.New.Version, rel(m.Dir, sibling.Dir))
	case path.Clean(path.Join(m.Dir, r.New.Path)) != sibling.Dir:
		return fmt.Errorf("%s/go.mod replaces %s with %s, which is not its directory %s", m.Dir, r.Old.Path, r.New.Path, rel(m.Dir, sibling.Dir))
	}
	return nil
}

// rel is the relative path from directory from to directory to, both
// slash-separated and relative to the repository root.
func rel(from, to string) string {
	f, t := split(from), split(to)
	i := 0
	for i < len(f) && i < len(t) && f[i] == t[i] {
		i++
	}
	parts := []string{}
	for range f[i:] {
		parts = append(parts, "..")
	}
	parts = append(parts, t[i:]...)
	if len(parts) == 0 {
		return "."
	}
	if parts[0] != ".." {
		return "./" + strings.Join(parts, "/")
	}
	return strings.Join(parts, "/")
}

func split(dir string) []string {
	if dir == "." {
		return nil
	}
	return strings.Split(dir, "/")
}

func index(mods []Module) map[string]Module {
	byPath := make(map[string]Module, len(mods))
	for _, m := range mods {
		byPath[m.Path] = m
	}
	return byPath
}
