// Package release checks the release as a user meets it: every published
// module of the repository, served at its release version by a module proxy
// made of the working tree, installs into a module outside the repository
// with none of the local wiring (go.work, replace lines). RELEASING.md says
// when to run it and which tags follow.
package release

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// devDir is the development module's directory, which is never tagged.
const devDir = "dev"

// mod is one published module of the repository.
type mod struct {
	dir  string // relative to the repository root, slash-separated
	file *modfile.File
}

// published finds every module under root but the development module, the
// root first: each directory holding a go.mod, outside hidden and testdata
// directories.
func published(t *testing.T, root string) []mod {
	t.Helper()
	var mods []mod
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || rel == devDir) {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
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
		mods = append(mods, mod{dir: filepath.ToSlash(filepath.Dir(rel)), file: f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(mods, func(a, b mod) int {
		return strings.Compare(strings.TrimPrefix(a.dir, "."), strings.TrimPrefix(b.dir, "."))
	})
	if len(mods) == 0 || mods[0].dir != "." {
		t.Fatalf("no go.mod at the repository root %s", root)
	}
	for _, m := range mods[1:] {
		// The go command finds a sub-module's tag by its directory.
		if want := mods[0].file.Module.Mod.Path + "/" + m.dir; m.file.Module.Mod.Path != want {
			t.Fatalf("%s/go.mod: module %s, want %s, or no tag could name it", m.dir, m.file.Module.Mod.Path, want)
		}
	}
	return mods
}

// releaseVersion is the version at which the repository's modules require
// each other (dev's go.mod included): the version the release tags.
func releaseVersion(t *testing.T, root string, mods []mod) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, devDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	dev, err := modfile.Parse("dev/go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.file.Module.Mod.Path] = true
	}
	version := ""
	for _, f := range append([]*modfile.File{dev}, files(mods)...) {
		for _, r := range f.Require {
			if !ours[r.Mod.Path] {
				continue
			}
			if version != "" && r.Mod.Version != version {
				t.Fatalf("%s requires %s %s, another module requires one at %s: the modules are released at one version", f.Module.Mod.Path, r.Mod.Path, r.Mod.Version, version)
			}
			version = r.Mod.Version
		}
	}
	if version == "" {
		t.Fatal("no module of the repository requires another: no release version to check")
	}
	return version
}

func has(m map[string]string, k string) bool { _, ok := m[k]; return ok }

func files(mods []mod) []*modfile.File {
	var out []*modfile.File
	for _, m := range mods {
		out = append(out, m.file)
	}
	return out
}

// writeProxy lays mods out in dir at version as the go command reads a
// GOPROXY=file:// tree: a list, an info file, the go.mod and the zip made
// from the working tree (modzip leaves nested modules and .git out).
func writeProxy(t *testing.T, dir, root string, mods []mod, version string) {
	t.Helper()
	info, err := json.Marshal(map[string]any{"Version": version, "Time": time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		path := m.file.Module.Mod.Path
		escaped, err := module.EscapePath(path)
		if err != nil {
			t.Fatal(err)
		}
		at := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			t.Fatal(err)
		}
		src := filepath.Join(root, filepath.FromSlash(m.dir))
		goMod, err := os.ReadFile(filepath.Join(src, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		var zip bytes.Buffer
		if err := modzip.CreateFromDir(&zip, module.Version{Path: path, Version: version}, src); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  goMod,
			version + ".zip":  zip.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
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

func main() {
	l, err := keyrate.New(2, time.Minute)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	fmt.Println(l.Allow("k"), l.Allow("k"), l.Allow("k"))
}
`

// TestInstallFromProxy serves every published module at the release
// version from a module proxy made of the working tree and, from an empty
// module outside the repository (GOWORK=off, GOFLAGS=-mod=mod, a module
// cache of its own): gets the core and redislimit and runs a program that
// uses both; gets every published module and loads all their packages with
// their dependencies; installs every command (a main package under a cmd
// directory) with go install pkg@version, or, where its module still has
// replace lines, which go install pkg@version refuses, with go install from
// the consumer module. Third-party modules come from the local module cache
// first, then from GOPROXY; only the repository's own skip the checksum
// database, which cannot know versions not yet tagged.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every published module as a user would; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mods := published(t, root)
	version := releaseVersion(t, root, mods)
	work := t.TempDir()
	proxy := filepath.Join(work, "proxy")
	writeProxy(t, proxy, root, mods, version)
	core := mods[0].file.Module.Mod.Path

	goTool := newGo(t, work, proxy, core)
	consumer := filepath.Join(work, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		t.Fatal(err)
	}
	goMod := fmt.Sprintf("module example.com/consumer\n\ngo %s\n", mods[0].file.Go.Version)
	if err := os.WriteFile(filepath.Join(consumer, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), []byte(consumerMain), 0o644); err != nil {
		t.Fatal(err)
	}

	goTool(consumer, "get", core+"@"+version, core+"/redislimit@"+version)
	bin := filepath.Join(work, "bin")
	goTool(consumer, "build", "-o", filepath.Join(bin, "consumer"), ".")
	if out, err := exec.Command(filepath.Join(bin, "consumer")).CombinedOutput(); err != nil || string(out) != "true true false\n" {
		t.Fatalf("the consumer program printed %q (%v), want %q", out, err, "true true false\n")
	}

	get := []string{"get"}
	for _, m := range mods {
		get = append(get, m.file.Module.Mod.Path+"@"+version)
	}
	goTool(consumer, get...)
	goTool(consumer, "list", "-deps", core+"/...")

	var installed, fromModule []string
	listed := goTool(consumer, "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{.Module.Path}}{{end}}`, core+"/...")
	for line := range strings.Lines(listed) {
		pkg, modPath, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.Contains(strings.TrimPrefix(pkg, core)+"/", "/cmd/") {
			continue
		}
		i := slices.IndexFunc(mods, func(m mod) bool { return m.file.Module.Mod.Path == modPath })
		if i >= 0 && len(mods[i].file.Replace) > 0 {
			goTool(consumer, "install", pkg)
			fromModule = append(fromModule, pkg)
		} else {
			goTool(work, "install", pkg+"@"+version)
			installed = append(installed, pkg)
		}
		name := pkg[strings.LastIndex(pkg, "/")+1:]
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			t.Errorf("%s: no %s installed: %v", pkg, name, err)
		}
	}
	if !slices.Contains(installed, core+"/cmd/keyrate-load") {
		t.Errorf("%s/cmd/keyrate-load was not installed with go install pkg@%s (installed: %q)", core, version, installed)
	}
	t.Logf("%s: go install pkg@%s works for %q", version, version, installed)
	if len(fromModule) > 0 {
		t.Logf("installed from a module that requires them, since their go.mod has replace lines (RELEASING.md): %q", fromModule)
	}
}

// newGo returns a function that runs the go command in a directory as a
// user outside the repository would, with a module cache and GOBIN under
// work, and returns its standard output; a failure ends the test.
func newGo(t *testing.T, work, proxy, core string) func(dir string, args ...string) string {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	userCache, userProxy, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	proxies := []string{"file://" + filepath.ToSlash(proxy)}
	if download := filepath.Join(userCache, "cache", "download"); userCache != "" {
		if _, err := os.Stat(download); err == nil {
			proxies = append(proxies, "file://"+filepath.ToSlash(download))
		}
	}
	if userProxy != "" {
		proxies = append(proxies, userProxy)
	}
	set := map[string]string{
		"GOWORK":      "off",
		"GOFLAGS":     "-mod=mod -modcacherw -trimpath", // -trimpath: build cache hits although the module cache moves
		"GOPROXY":     strings.Join(proxies, ","),
		"GONOSUMDB":   core,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOTOOLCHAIN": "local",
		// A module cache of its own, so that versions not yet tagged never
		// reach the user's.
		"GOMODCACHE": filepath.Join(work, "modcache"),
		"GOBIN":      filepath.Join(work, "bin"),
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !has(set, k) {
			env = append(env, kv)
		}
	}
	for k, v := range set {
		env = append(env, k+"="+v)
	}
	return func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("go %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
		}
		return stdout.String()
	}
}
