// Package snippets turns the Go code blocks of a Markdown file into Go
// files that compile exactly when the snippets do, so that a README's code
// stays true to the API it shows.
//
// A block is a fenced block whose info string is "go". What it holds
// decides how it is compiled:
//
//   - a block that starts with a package clause is a file as it stands;
//   - a block of declarations (funcs, types, vars, consts) gets a package
//     clause, its imports, and an empty main;
//   - a block of statements goes into func snippet() error, followed by
//     return nil, so that it may return errors.
//
// Imports are added for the packages a block names and does not import:
// keyrate's own, go-redis as redis, and the standard library's usual ones
// (see Imports). A block that is not meant to compile starts with the line
// "// not compiled: <why>". Every generated file carries //line directives,
// so that compile errors point at the Markdown file and line. Gofmt checks
// that a block is laid out as gofmt would lay it out.
package snippets

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"slices"
	"strings"
)

// Snippet is one Go block of a Markdown file.
type Snippet struct {
	File string // the Markdown file's name, as given to Extract
	Line int    // the line of the block's first line of code
	Code string
}

// Skipped reports whether the block says it is not meant to compile.
func (s Snippet) Skipped() bool {
	return strings.HasPrefix(strings.TrimSpace(s.Code), "// not compiled")
}

// Extract returns the Go blocks of a Markdown document: fenced with three
// or more backticks or tildes, indented by at most three spaces (as in a
// list item), with the info string "go". The fence's indentation is taken
// off every line of the block.
func Extract(file string, md []byte) []Snippet {
	var out []Snippet
	lines := strings.Split(string(md), "\n")
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		start := i + 1
		var code []string
		for i++; i < len(lines) && !closes(lines[i], fence); i++ {
			code = append(code, unindent(lines[i], indent))
		}
		if info == "go" {
			out = append(out, Snippet{File: file, Line: start + 1, Code: strings.Join(code, "\n") + "\n"})
		}
	}
	return out
}

func openFence(line string) (indent int, fence, info string, ok bool) {
	trimmed := strings.TrimLeft(line, " ")
	indent = len(line) - len(trimmed)
	if indent > 3 || len(trimmed) < 3 || trimmed[0] != '`' && trimmed[0] != '~' {
		return 0, "", "", false
	}
	n := len(trimmed) - len(strings.TrimLeft(trimmed, trimmed[:1]))
	if n < 3 {
		return 0, "", "", false
	}
	fields := strings.Fields(trimmed[n:])
	if len(fields) > 0 {
		info = fields[0]
	}
	return indent, trimmed[:n], info, true
}

func closes(line, fence string) bool {
	trimmed := strings.TrimSpace(line)
	return strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]) == ""
}

func unindent(line string, indent int) string {
	for i := 0; i < indent && strings.HasPrefix(line, " "); i++ {
		line = line[1:]
	}
	return line
}

// Imports maps the package names a block may use without importing them to
// their import paths.
var Imports = map[string]string{
	"keyrate":    "github.com/keyrate/keyrate",
	"httplimit":  "github.com/keyrate/keyrate/httplimit",
	"middleware": "github.com/keyrate/keyrate/middleware",
	"redislimit": "github.com/keyrate/keyrate/redislimit",
	"redis":      "github.com/redis/go-redis/v9",
	"context":    "context",
	"errors":     "errors",
	"fmt":        "fmt",
	"http":       "net/http",
	"io":         "io",
	"log":        "log",
	"netip":      "net/netip",
	"os":         "os",
	"slog":       "log/slog",
	"strings":    "strings",
	"time":       "time",
}

// Program returns the Go file that compiles s, and the import paths it
// uses.
func Program(s Snippet) (src string, imports []string, err error) {
	where := fmt.Sprintf("%s:%d", s.File, s.Line)
	directive := "//line " + where + ":1\n"
	fset := token.NewFileSet()

	if f, err := parser.ParseFile(fset, "", s.Code, parser.PackageClauseOnly); err == nil && f.Name != nil {
		full, err := parser.ParseFile(fset, "", s.Code, parser.ImportsOnly)
		if err != nil {
			return "", nil, fmt.Errorf("%s: %v", where, err)
		}
		for _, spec := range full.Imports {
			imports = append(imports, strings.Trim(spec.Path.Value, `"`))
		}
		return directive + s.Code, imports, nil
	}

	decls := "package main\n\n" + directive + s.Code
	if f, err := parser.ParseFile(fset, "", decls, 0); err == nil {
		names := needed(f)
		var tail string
		if f.Scope.Lookup("main") == nil {
			tail = "\nfunc main() {}\n"
		}
		return "package main\n\n" + importBlock(names) + directive + s.Code + tail, paths(names), nil
	}

	body := "package main\n\nfunc snippet() error {\n" + directive + s.Code + "\n\treturn nil\n}\n"
	f, err := parser.ParseFile(fset, "", body, 0)
	if err != nil {
		return "", nil, fmt.Errorf("%s: neither declarations nor statements: %v", where, err)
	}
	names := needed(f)
	return "package main\n\n" + importBlock(names) + body[len("package main\n\n"):] + "\nfunc main() { _ = snippet }\n", paths(names), nil
}

// needed is the names in Imports that f uses as a package without
// declaring or importing them.
func needed(f *ast.File) []string {
	unresolved := map[*ast.Ident]bool{}
	for _, id := range f.Unresolved {
		unresolved[id] = true
	}
	imported := map[string]bool{}
	for _, spec := range f.Imports {
		p := strings.Trim(spec.Path.Value, `"`)
		name := p[strings.LastIndex(p, "/")+1:]
		if spec.Name != nil {
			name = spec.Name.Name
		}
		imported[name], imported[p] = true, true
	}
	var names []string
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && unresolved[id] && !imported[id.Name] && !imported[Imports[id.Name]] && Imports[id.Name] != "" && !slices.Contains(names, id.Name) {
				names = append(names, id.Name)
			}
		}
		return true
	})
	slices.Sort(names)
	return names
}

func importBlock(names []string) string {
	if len(names) == 0 {
		return ""
	}
	var b bytes.Buffer
	b.WriteString("import (\n")
	for _, n := range names {
		fmt.Fprintf(&b, "\t%s %q\n", n, Imports[n])
	}
	b.WriteString(")\n\n")
	return b.String()
}

func paths(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, Imports[n])
	}
	return out
}

// Gofmt reports whether s is laid out as gofmt would lay it out: as a file,
// as declarations, or as statements in a function body (indented by one
// tab there, and compared with that tab taken off).
func Gofmt(s Snippet) (bool, error) {
	for _, shape := range []struct{ head, tail, indent string }{
		{"", "", ""},
		{"package p\n\n", "", ""},
		{"package p\n\nfunc f() {\n", "}\n", "\t"},
	} {
		var b strings.Builder
		b.WriteString(shape.head)
		for line := range strings.Lines(s.Code) {
			if strings.TrimSpace(line) != "" {
				b.WriteString(shape.indent)
			}
			b.WriteString(line)
		}
		b.WriteString(shape.tail)
		if out, err := format.Source([]byte(b.String())); err == nil {
			return string(out) == b.String(), nil
		}
	}
	return false, fmt.Errorf("%s:%d: gofmt cannot parse it", s.File, s.Line)
}
