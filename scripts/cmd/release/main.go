// Command release checks that the repository's modules install as released
// and lists the tags that release them.
//
//	go -C scripts run ./cmd/release        # check the install from a module proxy
//	go -C scripts run ./cmd/release -tags  # the tags to push, in order
//
// The check serves every module at the version they require each other at,
// from a file-based module proxy made of the working tree, and from an
// empty module outside the repository gets the core and redislimit, builds
// a program that uses both, loads every package of every module and
// installs each command with go install pkg@version (see RELEASING.md).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/keyrate/keyrate/scripts/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("root", "..", "the repository root")
	tags := fs.Bool("tags", false, "print the tags that release every module, in the order to push them, and exit")
	verbose := fs.Bool("v", false, "print every go command the check runs, with its output")
	keep := fs.Bool("keep", false, "keep the proxy, the consumer module and its module cache, and print where")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "release: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if *tags {
		return printTags(*root, stdout, stderr)
	}

	work, err := os.MkdirTemp("", "keyrate-release-")
	if err != nil {
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	if *keep {
		fmt.Fprintln(stdout, "work directory:", work)
	} else {
		defer os.RemoveAll(work)
	}
	var log bytes.Buffer
	var w io.Writer = &log
	if *verbose {
		w = stdout
	}
	in, err := release.CheckInstall(ctx, *root, work, w)
	if err != nil {
		if !*verbose {
			stderr.Write(log.Bytes())
		}
		fmt.Fprintln(stderr, "release:", err)
		return 1
	}
	var paths []string
	for _, m := range in.Modules {
		paths = append(paths, m.Path)
	}
	fmt.Fprintf(stdout, "every module installs at %s from a module proxy, with no local wiring:\n  %s\n", in.Version, strings.Join(paths, "\n  "))
	if len(in.Commands) > 0 {
		fmt.Fprintf(stdout, "go install pkg@%s works for:\n  %s\n", in.Version, strings.Join(in.Commands, "\n  "))
	}
	if len(in.FromClone) > 0 {
		fmt.Fprintf(stdout, "run from a clone only (their modules have replace directives):\n  %s\n", strings.Join(in.FromClone, "\n  "))
	}
	return 0
}

func printTags(root string, stdout, stderr io.Writer) int {
	mods, err := release.Discover(filepath.Clean(root))
	if err == nil {
		var version string
		if version, err = release.Version(mods); err == nil {
			if mods, err = release.Order(mods); err == nil {
				for _, m := range mods {
					fmt.Fprintln(stdout, m.Tag(version))
				}
				return 0
			}
		}
	}
	fmt.Fprintln(stderr, "release:", err)
	return 1
}
