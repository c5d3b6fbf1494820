// Package readme checks that the Go code in the repository's Markdown files
// is code that go test compiles and runs: every go block quotes an Example
// function of a package at or below the file's directory, either its body
// (with or without its output comment) or declarations of a file that holds
// an Example (a whole-file example). To change a README's code, change the
// Example and paste it.
package readme

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// block is one go block of a Markdown file.
type block struct {
	line int // of the block's first line of code
	code string
}

// goBlocks returns the fenced blocks of md whose info string starts with
// "go", with the fence's indentation (at most three spaces, as in a list
// item) taken off every line.
func goBlocks(md string) []block {
	var out []block
	lines := strings.Split(md, "\n")
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimLeft(lines[i], " ")
		indent := len(lines[i]) - len(trimmed)
		n := len(trimmed) - len(strings.TrimLeft(trimmed, "`"))
		if n == 0 {
			n = len(trimmed) - len(strings.TrimLeft(trimmed, "~"))
		}
		if indent > 3 || n < 3 {
			continue
		}
		fence, info := trimmed[:n], strings.Fields(trimmed[n:])
		start := i + 1
		var code []string
		for i++; i < len(lines) && !(strings.HasPrefix(strings.TrimSpace(lines[i]), fence) && strings.Trim(strings.TrimSpace(lines[i]), fence[:1]) == ""); i++ {
			line := lines[i]
			for j := 0; j < indent && strings.HasPrefix(line, " "); j++ {
				line = line[1:]
			}
			code = append(code, line)
		}
		if len(info) > 0 && info[0] == "go" {
			out = append(out, block{line: start + 1, code: strings.Join(code, "\n")})
		}
	}
	return out
}

// quotable is what a README below some directory may quote: the bodies of
// its Example functions, and the declarations of its files that hold one.
type quotable struct{ bodies, decls map[string]bool }

// examples reads every _test.go file under dir.
func examples(dir string) (quotable, error) {
	q := quotable{map[string]bool{}, map[string]bool{}}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != dir && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(p, "_test.go"):
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, src, parser.ParseComments)
		if err != nil {
			return err
		}
		text := func(n ast.Node) string { return string(src[n.Pos()-f.FileStart : n.End()-f.FileStart]) }
		hasExample := false
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") && fn.Body != nil {
				hasExample = true
				body := text(fn.Body)
				body = strings.Trim(body[1:len(body)-1], "\n")
				body = strings.ReplaceAll("\n"+body, "\n\t", "\n")[1:]
				q.bodies[body] = true
				if i := outputComment(body); i >= 0 {
					q.bodies[strings.TrimRight(body[:i], "\n")] = true
				}
			}
		}
		if hasExample {
			for _, decl := range f.Decls {
				q.decls[declText(decl, text)] = true
			}
		}
		return nil
	})
	return q, err
}

// declText is a top-level declaration with its doc comment.
func declText(decl ast.Decl, text func(ast.Node) string) string {
	var doc *ast.CommentGroup
	switch d := decl.(type) {
	case *ast.FuncDecl:
		doc = d.Doc
	case *ast.GenDecl:
		doc = d.Doc
	}
	if doc == nil {
		return text(decl)
	}
	return text(doc) + "\n" + text(decl)
}

// outputComment returns where the output comment of an Example's body
// starts, or -1.
func outputComment(body string) int {
	i := strings.LastIndex("\n"+body, "\n// Output:")
	if j := strings.LastIndex("\n"+body, "\n// Unordered output:"); j > i {
		i = j
	}
	return i
}

// quotes reports whether code is the body of an Example in q, or
// declarations of a file in q that holds one.
func (q quotable) quotes(code string) bool {
	code = strings.Trim(code, "\n")
	if q.bodies[code] {
		return true
	}
	src := "package p\n\n" + code + "\n"
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ParseComments)
	if err != nil || len(f.Decls) == 0 {
		return false
	}
	text := func(n ast.Node) string { return src[n.Pos()-f.FileStart : n.End()-f.FileStart] }
	for _, decl := range f.Decls {
		if !q.decls[declText(decl, text)] {
			return false
		}
	}
	return true
}

// check returns a line for each go block of the Markdown files under root
// that quotes no Example.
func check(root string) ([]string, error) {
	var problems []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules"):
			return filepath.SkipDir
		case d.IsDir() || !strings.HasSuffix(p, ".md"):
			return nil
		}
		md, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		blocks := goBlocks(string(md))
		if len(blocks) == 0 {
			return nil
		}
		dir := filepath.Dir(p)
		q, err := examples(dir)
		if err != nil {
			return err
		}
		name, _ := filepath.Rel(root, p)
		for _, b := range blocks {
			if !q.quotes(b.code) {
				problems = append(problems, fmt.Sprintf("%s:%d: this go block quotes no Example under %s (neither an Example's body nor declarations of a file holding one)", filepath.ToSlash(name), b.line, filepath.ToSlash(filepath.Dir(name))+"/"))
			}
		}
		return nil
	})
	return problems, err
}

// TestMarkdownQuotesExamples checks every Markdown file of the repository.
func TestMarkdownQuotesExamples(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestCheck runs the check on a small tree: a README quoting an Example's
// body, with and without its output, a whole-file example's declarations,
// and three blocks that quote nothing it may quote.
func TestCheck(t *testing.T) {
	root := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("lib/example_test.go", "package lib_test\n\nimport \"fmt\"\n\n"+
		"func Example() {\n\tx := 1\n\tfmt.Println(x)\n\t// Output: 1\n}\n")
	write("lib/whole_example_test.go", "package lib_test\n\nimport \"fmt\"\n\n"+
		"// hello greets.\nfunc hello() { fmt.Println(\"hi\") }\n\nconst n = 2\n\n"+
		"func Example_hello() {\n\thello()\n\t// Output: hi\n}\n")
	write("lib/helper_test.go", "package lib_test\n\nfunc helper() {}\n")
	write("other/example_test.go", "package other_test\n\nfunc Example() {\n\tprintln()\n}\n")
	var md bytes.Buffer
	for _, code := range []string{
		"x := 1\nfmt.Println(x)\n// Output: 1",                                  // 4: the body
		"x := 1\nfmt.Println(x)",                                                // 11: without its output
		"// hello greets.\nfunc hello() { fmt.Println(\"hi\") }\n\nconst n = 2", // 17
		"x := 2\nfmt.Println(x)",                                                // 25: changed
		"func helper() {}",                                                      // 31: no Example in its file
		"println()",                                                             // 36: an Example of another directory
		"// hello greets.\nfunc hello() {}",                                     // 41: a changed declaration
	} {
		fmt.Fprintf(&md, "text\n\n```go\n%s\n```\n", code)
	}
	md.WriteString("\n```sh\nnot go\n```\n")
	write("lib/README.md", md.String())

	problems, err := check(root)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, p := range problems {
		where, _, _ := strings.Cut(p, ": ")
		lines = append(lines, where)
	}
	if got, want := strings.Join(lines, " "), "lib/README.md:25 lib/README.md:31 lib/README.md:36 lib/README.md:41"; got != want {
		t.Errorf("check found %q, want %q:\n%s", got, want, strings.Join(problems, "\n"))
	}
}
