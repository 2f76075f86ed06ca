// Command nodates fails when a Go comment or a command-line help text in the given files carries
// a calendar date (20YY-MM-DD). Comments say why the code is as it is, and help texts say what a
// flag does; a dated figure is a lab note that goes stale the day it is written, so measurements
// belong in docs/benchmarks.md, where each one has its date and commit. hack/verify.sh runs it
// over every Go file of the repository.
//
// Usage: nodates FILE.go...
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
)

// datePattern is a calendar date of this century, the way a diary entry writes it.
var datePattern = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`)

// allowed are the dates that are not measurements: 2006-01-02 is Go's reference time, spelled
// out in comments that explain a time layout.
var allowed = map[string]bool{
	"2006-01-02": true,
}

// flagFunc matches the flag and pflag methods whose last argument is a help text.
var flagFunc = regexp.MustCompile(`^(Bool|Int|Int32|Int64|Uint|Uint32|Uint64|Float32|Float64|String|StringSlice|StringArray|StringToString|Duration|DurationSlice|IntSlice|Count|Var|Func|BoolFunc|TextVar|IP|IPNet)(Var)?P?$`)

// helpFields are the cobra.Command fields a user reads with --help.
var helpFields = map[string]bool{"Short": true, "Long": true, "Example": true}

// finding is one dated text.
type finding struct {
	pos  token.Position
	what string // "comment" or "help text"
	date string
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: nodates FILE.go...")
		os.Exit(2)
	}
	var all []finding
	for _, path := range os.Args[1:] {
		src, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodates: %v\n", err)
			os.Exit(2)
		}
		found, err := check(path, src)
		if err != nil {
			fmt.Fprintf(os.Stderr, "nodates: %v\n", err)
			os.Exit(2)
		}
		all = append(all, found...)
	}
	for _, f := range all {
		fmt.Fprintf(os.Stderr, "%s: %s carries the date %s: say why in the present tense, and put the measurement in docs/benchmarks.md\n", f.pos, f.what, f.date)
	}
	if len(all) > 0 {
		os.Exit(1)
	}
}

// check returns the dated comments and help texts of one Go source file.
func check(path string, src []byte) ([]finding, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	var found []finding
	report := func(pos token.Pos, what, text string) {
		for _, d := range datePattern.FindAllString(text, -1) {
			if !allowed[d] {
				found = append(found, finding{pos: fset.Position(pos), what: what, date: d})
			}
		}
	}
	for _, group := range file.Comments {
		for _, c := range group.List {
			report(c.Slash, "comment", c.Text)
		}
	}
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || len(n.Args) < 2 || !flagFunc.MatchString(sel.Sel.Name) {
				return true
			}
			forEachString(n.Args[len(n.Args)-1], func(pos token.Pos, s string) { report(pos, "help text", s) })
		case *ast.KeyValueExpr:
			if key, ok := n.Key.(*ast.Ident); ok && helpFields[key.Name] {
				forEachString(n.Value, func(pos token.Pos, s string) { report(pos, "help text", s) })
			}
		}
		return true
	})
	return found, nil
}

// forEachString calls fn with every string literal in expr (a help text is often a
// concatenation of several).
func forEachString(expr ast.Expr, fn func(token.Pos, string)) {
	ast.Inspect(expr, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			s = lit.Value
		}
		fn(lit.Pos(), s)
		return true
	})
}
