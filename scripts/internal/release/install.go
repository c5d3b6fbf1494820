package release

import (
	"bytes"
	"context"
	"encoding/json"
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
// under a cmd directory) with go install pkg@version. Third-party modules come from the local
// module cache first, then from the configured GOPROXY; checksums are not
// looked up, since the released versions exist only in the local proxy.
// Every go command and its output go to log. work should be empty and
// outside root.
func CheckInstall(ctx context.Context, root, work string, log io.Writer) (Installed, error) {
	mods, err := Discover(root)
	if err != nil {
		return Installed{}, err
	}
	version, err := Version(mods)
	if err != nil {
		return Installed{}, err
	}
	if err := CheckWiring(mods); err != nil {
		return Installed{}, err
	}
	in := Installed{Version: version, Modules: mods}
	proxy := filepath.Join(work, "proxy")
	if err := BuildProxy(proxy, root, mods, version); err != nil {
		return in, err
	}
	g, err := newGoTool(ctx, work, proxy, log)
	if err != nil {
		return in, err
	}
	consumer := filepath.Join(work, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return in, err
	}
	goMod := fmt.Sprintf("module example.com/consumer\n\ngo %s\n", mods[0].File.Go.Version)
	for name, text := range map[string]string{"go.mod": goMod, "main.go": consumerMain} {
		if err := os.WriteFile(filepath.Join(consumer, name), []byte(text), 0o644); err != nil {
			return in, err
		}
	}

	core, redis := mods[0].Path, mods[0].Path+"/redislimit"
	if _, err := g.run(consumer, "get", core+"@"+version, redis+"@"+version); err != nil {
		return in, err
	}
	bin := filepath.Join(work, "bin", "consumer")
	if _, err := g.run(consumer, "build", "-o", bin, "."); err != nil {
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
	if _, err := g.run(consumer, get...); err != nil {
		return in, err
	}
	// Loading every package resolves every import the way a consumer's
	// go command would; building them all would compile the benchmarks'
	// peer libraries a second time for nothing the loading does not show.
	if _, err := g.run(consumer, "list", "-deps", core+"/..."); err != nil {
		return in, err
	}

	listed, err := g.run(consumer, "list", "-f", "{{if eq .Name \"main\"}}{{.ImportPath}}{{end}}", core+"/...")
	if err != nil {
		return in, err
	}
	for line := range strings.Lines(listed) {
		pkg := strings.TrimSpace(line)
		if pkg == "" || !strings.Contains("/"+strings.TrimPrefix(pkg, core)+"/", "/cmd/") {
			continue
		}
		if _, err := g.run(consumer, "install", pkg+"@"+version); err != nil {
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

// goTool runs the go command as a consumer outside the repository would,
// with every setting that could reach back into it or into the user's own
// module cache overridden.
type goTool struct {
	ctx context.Context
	env []string
	log io.Writer
}

func newGoTool(ctx context.Context, work, proxy string, log io.Writer) (*goTool, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "-json", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	var user struct{ GOMODCACHE, GOPROXY string }
	if err := json.Unmarshal(out, &user); err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	// The proxy for released keyrate modules first, then the module cache
	// the repository's own builds filled (laid out as a proxy too), then
	// whatever the user reaches modules through.
	proxies := []string{fileURL(proxy)}
	if cached := filepath.Join(user.GOMODCACHE, "cache", "download"); user.GOMODCACHE != "" {
		if _, err := os.Stat(cached); err == nil {
			proxies = append(proxies, fileURL(cached))
		}
	}
	if user.GOPROXY != "" {
		proxies = append(proxies, user.GOPROXY)
	}
	set := map[string]string{
		"GOPROXY":     strings.Join(proxies, ","),
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath",
		"GO111MODULE": "on",
		"GOTOOLCHAIN": "local",
		// A fresh module cache, so that the not yet released versions never
		// reach the user's own; -trimpath keeps build cache hits across runs
		// although its path changes.
		"GOMODCACHE": filepath.Join(work, "modcache"),
		"GOBIN":      filepath.Join(work, "bin"),
		// The released versions exist only in the local proxy, so no
		// checksum database knows them; the rest come from the module cache,
		// checked when it was filled.
		"GOSUMDB":    "off",
		"GONOSUMDB":  "",
		"GOPRIVATE":  "",
		"GONOPROXY":  "",
		"GOINSECURE": "",
	}
	env := []string{}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return &goTool{ctx: ctx, env: env, log: log}, nil
}

// run runs go with args in dir and returns its standard output.
func (g *goTool) run(dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(g.ctx, "go", args...)
	cmd.Dir, cmd.Env = dir, g.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	fmt.Fprintf(g.log, "$ go %s\n%s%s", strings.Join(args, " "), stderr.String(), stdout.String())
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String(), nil
}

func fileURL(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = dir
	}
	abs = filepath.ToSlash(abs)
	if !strings.HasPrefix(abs, "/") {
		abs = "/" + abs // a Windows drive letter
	}
	return "file://" + abs
}
