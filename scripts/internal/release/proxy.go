package release

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// BuildProxy writes a module proxy into dst, in the layout the go command
// reads through GOPROXY=file://dst: for each module, its go.mod, the zip of
// its files, an info file and a version list, all at version, made from the
// working tree under root. Files git ignores stay out, as they would from a
// tagged commit; in a directory that is not a git checkout every file goes
// in. Nested modules and vendor directories are left out by the zip rules
// themselves.
func BuildProxy(dst, root string, mods []Module, version string) error {
	files, err := workingFiles(root)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for _, m := range mods {
		escaped, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		dir := filepath.Join(dst, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		goMod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"))
		if err != nil {
			return err
		}
		zipFiles, err := moduleFiles(root, m.Dir, files)
		if err != nil {
			return err
		}
		var zipped bytes.Buffer
		if err := modzip.Create(&zipped, module.Version{Path: m.Path, Version: version}, zipFiles); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		for name, data := range map[string][]byte{
			"list":            []byte(version + "\n"),
			version + ".info": info,
			version + ".mod":  goMod,
			version + ".zip":  zipped.Bytes(),
		} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// workingFiles lists the files of root's working tree that a commit would
// hold, slash-separated and relative to root: tracked ones still present and
// untracked ones git does not ignore. Outside a git checkout it is nil, and
// moduleFiles walks the directory instead.
func workingFiles(root string) ([]string, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return nil, nil
	}
	inside := exec.Command("git", "rev-parse", "--is-inside-work-tree")
	inside.Dir = root
	if out, err := inside.Output(); err != nil || strings.TrimSpace(string(out)) != "true" {
		return nil, nil
	}
	ls := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--deduplicate")
	ls.Dir = root
	var stderr bytes.Buffer
	ls.Stderr = &stderr
	out, err := ls.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, stderr.String())
	}
	var files []string
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		// A tracked file deleted from the working tree is listed too.
		if _, err := os.Lstat(filepath.Join(root, filepath.FromSlash(name))); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		files = append(files, name)
	}
	if files == nil {
		return nil, errors.New("git lists no files in " + root)
	}
	return files, nil
}

// moduleFiles is what goes into the zip of the module in dir: the listed
// files under it, or with no list, every file under it but .git.
func moduleFiles(root, dir string, listed []string) ([]modzip.File, error) {
	prefix := dir + "/"
	if dir == "." {
		prefix = ""
	}
	if listed == nil {
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(dir)), func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && d.Name() == ".git":
				return filepath.SkipDir
			case d.IsDir():
				return nil
			}
			name, err := filepath.Rel(root, p)
			listed = append(listed, filepath.ToSlash(name))
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	var out []modzip.File
	for _, name := range listed {
		if rel, ok := strings.CutPrefix(name, prefix); ok {
			out = append(out, file{path: rel, full: filepath.Join(root, filepath.FromSlash(name))})
		}
	}
	return out, nil
}

// file is one file of a module zip, read from the working tree.
type file struct{ path, full string }

func (f file) Path() string                 { return f.path }
func (f file) Lstat() (fs.FileInfo, error)  { return os.Lstat(f.full) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.full) }
