package main

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// section is one part of a markdown file: a heading line and what follows
// it up to the next heading of the same level.
type section struct {
	heading string // the heading line, "## Floor"; "" for what comes before the first
	body    string // the rest, from the line after the heading
}

// sections are a markdown file split at one heading level: parts[0] may be
// the text before the first heading (heading "").
type sections struct {
	parts sectionList
}

type sectionList []section

// splitSections splits md at the lines that start with prefix ("## " or
// "### ").
func splitSections(md, prefix string) sections {
	var s sections
	cur := section{}
	started := false
	for line := range strings.SplitAfterSeq(md, "\n") {
		if strings.HasPrefix(line, prefix) {
			if started || cur.body != "" {
				s.parts = append(s.parts, cur)
			}
			cur, started = section{heading: strings.TrimRight(line, "\n")}, true
			continue
		}
		cur.body += line
	}
	if started || cur.body != "" {
		s.parts = append(s.parts, cur)
	}
	return s
}

// String joins the sections back into markdown.
func (l sectionList) String() string {
	var b strings.Builder
	for _, p := range l {
		if p.heading != "" {
			b.WriteString(p.heading + "\n")
		}
		b.WriteString(p.body)
	}
	return b.String()
}

// String joins the sections back into markdown.
func (s sections) String() string { return s.parts.String() }

// find returns the section whose heading is heading.
func (s sections) find(heading string) (section, bool) {
	for _, p := range s.parts {
		if p.heading == heading && heading != "" {
			return p, true
		}
	}
	return section{}, false
}

// keep adds the sections of old that s lacks, each where old had it: just
// before the first section that followed it in old and that s has, or at
// the end. The text before the first heading is s's own.
func (s *sections) keep(old sections) {
	for i, p := range old.parts {
		if p.heading == "" {
			continue
		}
		if _, ok := s.find(p.heading); ok {
			continue
		}
		at := len(s.parts)
	next:
		for _, q := range old.parts[i+1:] {
			for j, r := range s.parts {
				if q.heading != "" && r.heading == q.heading {
					at = j
					break next
				}
			}
		}
		s.parts = append(s.parts[:at], append(sectionList{p}, s.parts[at:]...)...)
	}
}

// measuredPrefix starts the line that says which run measured a section.
const measuredPrefix = "Measured by "

// stamp puts the line that says which run measured a section at the top of
// its body, unless it has one.
func stamp(body, run string) string {
	rest := strings.TrimLeft(body, "\n")
	if strings.HasPrefix(rest, measuredPrefix) {
		return body
	}
	return fmt.Sprintf("\n%s`%s`.\n\n%s", measuredPrefix, run, rest)
}

// producedBy finds the run named at the top of a RESULTS.md from before
// each section named its own.
var producedBy = regexp.MustCompile("(?m)^Produced by `([^`]*)`")

// readPrevious reads the RESULTS.md being replaced, split at its "## "
// headings, each section (and each table of cmd/tables) stamped with the
// run that measured it.
func readPrevious(path string) (sections, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return sections{}, err
	}
	md := string(b)
	run := "an earlier run"
	if m := producedBy.FindStringSubmatch(md); m != nil {
		run = m[1]
	}
	s := splitSections(md, "## ")
	for i := range s.parts {
		p := &s.parts[i]
		switch p.heading {
		case "":
		case tablesHeading:
			sub := splitSections(p.body, "### ")
			for j := range sub.parts {
				if sub.parts[j].heading != "" {
					sub.parts[j].body = stamp(sub.parts[j].body, run)
				}
			}
			p.body = sub.String()
		default:
			p.body = stamp(p.body, run)
		}
	}
	return s, nil
}
