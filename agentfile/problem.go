package agentfile

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Problem is one thing wrong with a definition file: where it is and what
// to do about it.
type Problem struct {
	// File is the file's path in the directory loaded.
	File string
	// Line is the line of the file the problem is on, from 1; 0 when it is
	// about the whole file.
	Line int
	// Key is the front matter key the problem is about, if any.
	Key string
	// Message says what is wrong and what to do.
	Message string
}

// String returns the problem as "file:line: key: message".
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
	}
	b.WriteString(": ")
	if p.Key != "" {
		b.WriteString(p.Key)
		b.WriteString(": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Error is what a load that found problems returns: every problem of every
// file, in the order of the files and their lines. Nothing was loaded.
type Error struct {
	Problems []Problem
}

// Error lists the problems, one a line.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("agentfile: ")
	if len(e.Problems) == 1 {
		b.WriteString("1 problem, nothing loaded:")
	} else {
		b.WriteString(strconv.Itoa(len(e.Problems)))
		b.WriteString(" problems, nothing loaded:")
	}
	for _, p := range e.Problems {
		b.WriteString("\n\t")
		b.WriteString(p.String())
	}
	return b.String()
}

// sortProblems orders problems by file, then line, keeping the order in
// which one line's problems were found.
func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
}

// maxProblems bounds the problems reported of one file.
const maxProblems = 50

// problems collects the problems of one file.
type problems struct {
	file  string
	off   int // lines before the YAML text in the file
	list  []Problem
	warns []Problem
	more  int // problems past maxProblems, not listed
}

func (ps *problems) add(line int, key, msg string) {
	if len(ps.list) >= maxProblems {
		ps.more++
		return
	}
	if line > 0 {
		line += ps.off
	}
	ps.list = append(ps.list, Problem{File: ps.file, Line: line, Key: key, Message: msg})
}

// all returns the problems, with a last one that counts those not
// listed.
func (ps *problems) all() []Problem {
	if ps.more == 0 {
		return ps.list
	}
	return append(ps.list, Problem{File: ps.file, Message: fmt.Sprintf("and %d more problems: fix these first", ps.more)})
}

func (ps *problems) warn(line int, key, msg string) {
	if len(ps.warns) >= maxProblems {
		return
	}
	if line > 0 {
		line += ps.off
	}
	ps.warns = append(ps.warns, Problem{File: ps.file, Line: line, Key: key, Message: msg})
}
