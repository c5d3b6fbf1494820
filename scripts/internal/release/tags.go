package release

import (
	"fmt"
	"strings"
)

// Order returns the modules so that each comes after every sibling it
// requires: the order to push their tags in, so that a module proxy asked
// for one finds what it requires already tagged. Among modules free to go
// next it keeps the order of mods. A cycle is an error.
func Order(mods []Module) ([]Module, error) {
	byPath := index(mods)
	done := make(map[string]bool, len(mods))
	var out []Module
	for len(out) < len(mods) {
		progress := false
		for _, m := range mods {
			if done[m.Path] || !requiresOnly(m, byPath, done) {
				continue
			}
			done[m.Path] = true
			out = append(out, m)
			progress = true
		}
		if !progress {
			var left []string
			for _, m := range mods {
				if !done[m.Path] {
					left = append(left, m.Path)
				}
			}
			return nil, fmt.Errorf("these modules require each other in a cycle: %s", strings.Join(left, ", "))
		}
	}
	return out, nil
}

// requiresOnly reports whether every sibling that m requires is done.
func requiresOnly(m Module, byPath map[string]Module, done map[string]bool) bool {
	for _, r := range m.File.Require {
		if _, ok := byPath[r.Mod.Path]; ok && !done[r.Mod.Path] {
			return false
		}
	}
	return true
}
