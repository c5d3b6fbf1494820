// Package release checks the release as a user meets it: every published
// module, served at the release version by a module proxy made of the
// working tree, installs into a module outside the repository with none of
// the local wiring (go.work, replace lines). See RELEASING.md.
package release

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// published reads the go.mod of every module under root but dev, which is
// never tagged, and the version dev requires the root module at: the
// release version, at which the modules require each other.
func published(t *testing.T, root string) (map[string]*modfile.File, string) {
	mods := map[string]*modfile.File{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		mods[filepath.Dir(p)] = f
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	core, dev := mods[root], mods[filepath.Join(root, "dev")]
	delete(mods, filepath.Join(root, "dev"))
	for dir, f := range mods {
		// The go command finds a sub-module's tag by its directory.
		rel, _ := filepath.Rel(root, dir)
		if want := strings.TrimSuffix(core.Module.Mod.Path+"/"+filepath.ToSlash(rel), "/."); f.Module.Mod.Path != want {
			t.Fatalf("%s/go.mod: module %s, want %s, or no tag could name it", rel, f.Module.Mod.Path, want)
		}
	}
	for _, r := range dev.Require {
		if r.Mod.Path == core.Module.Mod.Path {
			return mods, r.Mod.Version
		}
	}
	t.Fatalf("dev/go.mod does not require %s: no release version to check", core.Module.Mod.Path)
	return nil, ""
}

// TestInstallFromProxy lays every published module out at the release
// version as a GOPROXY=file:// tree (x/mod/zip leaves nested modules and
// .git out of each zip). From an empty module outside the repository, with
// GOWORK=off, GOFLAGS=-mod=mod and a module cache of its own, it gets every
// published module, loads all their packages, and installs every command
// (a main package under a cmd directory): with go install pkg@version, or
// from the consumer module where the command's go.mod has replace lines,
// which go install pkg@version refuses. Other modules come from the local
// module cache first, then GOPROXY; only the repository's own, not yet
// tagged, skip the checksum database.
func TestInstallFromProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every published module as a user would; skipped with -short")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mods, version := published(t, root)
	work := t.TempDir()
	for dir, f := range mods {
		escaped, err := module.EscapePath(f.Module.Mod.Path)
		at := filepath.Join(work, "proxy", escaped, "@v")
		var zip bytes.Buffer
		if err == nil {
			err = os.MkdirAll(at, 0o755)
		}
		if err == nil {
			err = modzip.CreateFromDir(&zip, module.Version{Path: f.Module.Mod.Path, Version: version}, dir)
		}
		goMod, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
		for name, data := range map[string]string{
			"list":            version + "\n",
			version + ".info": fmt.Sprintf(`{"Version":%q}`, version),
			version + ".mod":  string(goMod),
			version + ".zip":  zip.String(),
		} {
			if err == nil {
				err = os.WriteFile(filepath.Join(at, name), []byte(data), 0o644)
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", f.Module.Mod.Path, err)
		}
	}

	core := mods[root].Module.Mod.Path
	goCmd := newGo(t, work, core)
	consumer := t.TempDir()
	goCmd(consumer, "mod", "init", "example.com/consumer")
	get := []string{"get"}
	replaced := map[string]bool{}
	for _, f := range mods {
		get = append(get, f.Module.Mod.Path+"@"+version)
		replaced[f.Module.Mod.Path] = len(f.Replace) > 0
	}
	goCmd(consumer, get...)
	goCmd(consumer, "list", "-deps", core+"/...") // each module's own tests have built them
	mains := goCmd(consumer, "list", "-f", `{{if eq .Name "main"}}{{.ImportPath}} {{.Module.Path}}{{end}}`, core+"/...")
	var installed []string
	for line := range strings.Lines(mains) {
		pkg, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
		if !strings.Contains(strings.TrimPrefix(pkg, core)+"/", "/cmd/") {
			continue
		}
		if replaced[mod] {
			goCmd(consumer, "install", pkg)
			t.Logf("%s has replace lines: installed from a module that requires it (RELEASING.md)", pkg)
		} else {
			goCmd(work, "install", pkg+"@"+version)
			installed = append(installed, pkg)
		}
		if _, err := os.Stat(filepath.Join(work, "bin", pkg[strings.LastIndex(pkg, "/")+1:])); err != nil {
			t.Errorf("%s: nothing installed: %v", pkg, err)
		}
	}
	if want := core + "/cmd/keyrate-load"; !strings.Contains(" "+strings.Join(installed, " ")+" ", " "+want+" ") {
		t.Errorf("%s was not installed with go install pkg@%s (installed so: %q)", want, version, installed)
	}
}

// newGo returns a function that runs the go command in a directory as a
// user outside the repository would, and returns its standard output.
func newGo(t *testing.T, work, core string) func(dir string, args ...string) string {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	cache, proxy, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	env := append(os.Environ(),
		"GOWORK=off", "GOTOOLCHAIN=local", "GOPRIVATE=", "GONOPROXY=", "GONOSUMDB="+core,
		"GOFLAGS=-mod=mod -modcacherw -trimpath", // -trimpath: build cache hits although the module cache moves
		"GOPROXY=file://"+filepath.Join(work, "proxy")+",file://"+filepath.Join(cache, "cache", "download")+","+proxy,
		"GOMODCACHE="+filepath.Join(work, "modcache"), // versions not yet tagged never reach the user's
		"GOBIN="+filepath.Join(work, "bin"))
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
