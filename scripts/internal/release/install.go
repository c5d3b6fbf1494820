package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Installed is what CheckInstall proved.
type Installed struct {
	Version  string
	Modules  []Module
	Commands []string // installed with go install pkg@version
	// FromClone are commands that go install pkg@version refused because
	// their module has replace directives: they run from a clone only.
	FromClone []string
}

// consumerMain uses the core and the Redis backend as a user would. It only
// names redislimit's types, so it needs no Redis server to run.
const consumerMain = `package main

import (
	"fmt"
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/redislimit"
)

// Both stores are keyrate Backends.
var _ = []keyrate.Backend{(*keyrate.Limiter)(nil), (*redislimit.Limiter)(nil)}

var _ = redislimit.New

func main() {
	l, err := keyrate.New(2, time.Minute)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println(l.Allow("k"), l.Allow("k"), l.Allow("k"))
}
`

const consumerWant = "true true false\n"

// CheckInstall proves that the repository's modules install as released.
// It checks their wiring, serves them at the release version from a module
// proxy made of root's working tree (in work/proxy), and from an empty
// module outside the repository (work/consumer), with GOWORK=off and
// GOFLAGS=-mod=mod: gets the core and redislimit, then builds and runs a
// program that uses both; gets every other module and loads all their
// packages with their dependencies; installs each command (a main package
// under a cmd directory) with go install pkg@version. Third-party modules
// come from the local module cache first, then from the configured GOPROXY;
// checksums are not looked up, since the released versions exist only in
// the local proxy. Every go command and its output go to log. work should
// be empty and outside root.
func CheckInstall(ctx context.Context, root, work string, log io.Writer) (Installed, error) {
	c, err := NewConsumer(ctx, root, work, log)
	if err != nil {
		return Installed{}, err
	}
	mods, version := c.Modules, c.Version
	in := Installed{Version: version, Modules: mods}
	if err := os.WriteFile(filepath.Join(c.Dir, "main.go"), []byte(consumerMain), 0o644); err != nil {
		return in, err
	}

	core, redis := mods[0].Path, mods[0].Path+"/redislimit"
	if _, err := c.Go("get", core+"@"+version, redis+"@"+version); err != nil {
		return in, err
	}
	bin := filepath.Join(work, "bin", "consumer")
	if _, err := c.Go("build", "-o", bin, "."); err != nil {
		return in, err
	}
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	fmt.Fprintf(log, "$ consumer\n%s", out)
	if err != nil || string(out) != consumerWant {
		return in, fmt.Errorf("the consumer program printed %q (%v), want %q", out, err, consumerWant)
	}

	get := []string{"get"}
	for _, m := range mods {
		get = append(get, m.Path+"@"+version)
	}
	if _, err := c.Go(get...); err != nil {
		return in, err
	}
	// Loading every package resolves every import the way a consumer's
	// go command would; building them all would compile the benchmarks'
	// peer libraries a second time for nothing the loading does not show.
	if _, err := c.Go("list", "-deps", core+"/..."); err != nil {
		return in, err
	}

	listed, err := c.Go("list", "-f", "{{if eq .Name \"main\"}}{{.ImportPath}}{{end}}", core+"/...")
	if err != nil {
		return in, err
	}
	for line := range strings.Lines(listed) {
		pkg := strings.TrimSpace(line)
		if pkg == "" || !strings.Contains("/"+strings.TrimPrefix(pkg, core)+"/", "/cmd/") {
			continue
		}
		if _, err := c.Go("install", pkg+"@"+version); err != nil {
			// The go command refuses a module with replace directives
			// here: such a command runs from a clone only.
			if strings.Contains(err.Error(), "contains one or\n\tmore replace directives") {
				in.FromClone = append(in.FromClone, pkg)
				continue
			}
			return in, err
		}
		if _, err := os.Stat(filepath.Join(work, "bin", pathBase(pkg))); err != nil {
			return in, fmt.Errorf("go install %s@%s: %w", pkg, version, err)
		}
		in.Commands = append(in.Commands, pkg)
	}
	slices.Sort(in.Commands)
	slices.Sort(in.FromClone)
	return in, nil
}

func pathBase(pkg string) string { return pkg[strings.LastIndex(pkg, "/")+1:] }
