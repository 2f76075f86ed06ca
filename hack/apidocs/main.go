// Command apidocs writes docs/api.md, the field reference of the gpu.scheduling/v1 custom
// resources, from the Go types in api/v1: their doc comments, JSON names and kubebuilder
// markers (defaults, bounds, enums, validation rules). The Go types are the source of the CRD
// schemas too, so the reference and the API server agree. Types of other packages (a pod
// template, metav1.Time) are named, not expanded: their reference is Kubernetes'.
//
// Usage: apidocs [-dir api/v1] [-out docs/api.md]. hack/update-codegen.sh (make generate) runs
// it, and hack/verify.sh fails when the committed file differs from its output.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

func main() {
	dir := flag.String("dir", "api/v1", "Directory of the API package.")
	out := flag.String("out", "docs/api.md", "File to write; - for standard output.")
	flag.Parse()
	pkg, err := load(*dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apidocs: %v\n", err)
		os.Exit(1)
	}
	text, err := render(pkg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "apidocs: %v\n", err)
		os.Exit(1)
	}
	if *out == "-" {
		_, err = os.Stdout.Write(text)
	} else {
		err = os.WriteFile(*out, text, 0o644)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "apidocs: %v\n", err)
		os.Exit(1)
	}
}

// typeInfo is one named type of the API package.
type typeInfo struct {
	name    string
	doc     string   // the doc comment, markers removed
	markers []string // the +markers of the doc comment and the comment block above it
	strct   *ast.StructType
	under   ast.Expr // the underlying type of a non-struct type
	values  []enumValue
}

// enumValue is one constant of a string type.
type enumValue struct {
	value, doc string
}

// apiPackage is what the generator reads from api/v1.
type apiPackage struct {
	group string
	types map[string]*typeInfo
}

// load parses the package's non-test files.
func load(dir string) (*apiPackage, error) {
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	sort.Strings(names)
	pkg := &apiPackage{types: map[string]*typeInfo{}}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(filepath.Base(name), "zz_generated") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", name, err)
		}
		files = append(files, f)
		if f.Doc != nil {
			for _, m := range markersOf(f.Doc) {
				if g, ok := strings.CutPrefix(m, "groupName="); ok {
					pkg.group = g
				}
			}
		}
	}
	if pkg.group == "" {
		return nil, fmt.Errorf("no +groupName marker in the package comment of %s", dir)
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				doc := ts.Doc
				if doc == nil {
					doc = gd.Doc
				}
				t := &typeInfo{name: ts.Name.Name, doc: docText(doc), markers: markersOf(doc)}
				// Markers such as +genclient stand in a comment block of their own above the
				// type's doc comment.
				t.markers = append(t.markers, markersAbove(f, gd, fset)...)
				if st, ok := ts.Type.(*ast.StructType); ok {
					t.strct = st
				} else {
					t.under = ts.Type
				}
				pkg.types[t.name] = t
			}
		}
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || len(vs.Values) != 1 {
					continue
				}
				lit, ok := vs.Values[0].(*ast.BasicLit)
				t := pkg.types[id.Name]
				if !ok || lit.Kind != token.STRING || t == nil {
					continue
				}
				doc := docText(vs.Doc)
				// "ClaimPending waits for a pod" reads "Waits for a pod" beside the value.
				if rest, ok := strings.CutPrefix(doc, vs.Names[0].Name+" "); ok && rest != "" {
					doc = strings.ToUpper(rest[:1]) + rest[1:]
				}
				t.values = append(t.values, enumValue{value: strings.Trim(lit.Value, "\"`"), doc: doc})
			}
		}
	}
	return pkg, nil
}

// markersAbove returns the markers of the comment block that ends one blank line above the
// declaration's doc comment, where controller-gen reads +genclient and
// +kubebuilder:object:root.
func markersAbove(f *ast.File, gd *ast.GenDecl, fset *token.FileSet) []string {
	first := gd.Pos()
	if gd.Doc != nil {
		first = gd.Doc.Pos()
	}
	line := fset.Position(first).Line
	for _, cg := range f.Comments {
		if fset.Position(cg.End()).Line == line-2 {
			return markersOf(cg)
		}
	}
	return nil
}

// markersOf returns the +markers of a comment group, without the plus.
func markersOf(cg *ast.CommentGroup) []string {
	if cg == nil {
		return nil
	}
	var ms []string
	for _, c := range cg.List {
		line := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
		if m, ok := strings.CutPrefix(line, "+"); ok {
			ms = append(ms, m)
		}
	}
	return ms
}

// docText is a comment group's prose: the lines that are not markers, joined.
func docText(cg *ast.CommentGroup) string {
	if cg == nil {
		return ""
	}
	var lines []string
	for _, c := range cg.List {
		line := strings.TrimSpace(strings.TrimPrefix(c.Text, "//"))
		if strings.HasPrefix(line, "+") {
			continue
		}
		lines = append(lines, line)
	}
	return strings.TrimSpace(strings.Join(strings.Fields(strings.Join(lines, " ")), " "))
}

// field is one row of a type's table.
type field struct {
	name, typ, doc string
	required       bool
	refs           []string // API types the field's type names, to document after this one
}

// kind is a root resource.
type kind struct {
	t                 *typeInfo
	scope, shortNames string
	status            bool
}

// render writes the whole reference.
func render(pkg *apiPackage) ([]byte, error) {
	var kinds []kind
	for _, t := range pkg.types {
		if !hasMarker(t.markers, "kubebuilder:object:root=true") || strings.HasSuffix(t.name, "List") {
			continue
		}
		k := kind{t: t, scope: "Namespaced", status: hasMarker(t.markers, "kubebuilder:subresource:status")}
		for _, m := range t.markers {
			if rest, ok := strings.CutPrefix(m, "kubebuilder:resource:"); ok {
				for _, kv := range strings.Split(rest, ",") {
					key, value, _ := strings.Cut(kv, "=")
					switch key {
					case "scope":
						k.scope = value
					case "shortName":
						k.shortNames = value
					}
				}
			}
		}
		kinds = append(kinds, k)
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("no type with +kubebuilder:object:root=true")
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i].t.name < kinds[j].t.name })

	var b bytes.Buffer
	fmt.Fprintf(&b, "# API reference: %s/v1\n\n", pkg.group)
	fmt.Fprintf(&b, "<!-- Generated by hack/apidocs from the Go types in api/v1 (make generate); do not edit. -->\n\n")
	fmt.Fprintf(&b, "Every field of the %s/v1 custom resources, from the Go types the CRD schemas are\n", pkg.group)
	fmt.Fprintf(&b, "made from. A field marked **required** must be set; the others may be left out. The API\n")
	fmt.Fprintf(&b, "server enforces the bounds, defaults and rules when an object is written. Types of\n")
	fmt.Fprintf(&b, "Kubernetes itself (a pod template, a condition, a time) are described in the Kubernetes API\n")
	fmt.Fprintf(&b, "reference.\n\n")
	fmt.Fprintf(&b, "| kind | scope | short name | status subresource | what it is |\n|---|---|---|---|---|\n")
	for _, k := range kinds {
		fmt.Fprintf(&b, "| [%s](#%s) | %s | %s | %s | %s |\n", k.t.name, anchor(k.t.name), k.scope, k.shortNames, yesNo(k.status), cell(firstSentence(k.t.doc)))
	}
	done := map[string]bool{}
	var enums []*typeInfo
	for _, k := range kinds {
		fmt.Fprintf(&b, "\n## %s\n\n", k.t.name)
		scope := "namespaced"
		if k.scope == "Cluster" {
			scope = "cluster-scoped"
		}
		fmt.Fprintf(&b, "`apiVersion: %s/v1`, `kind: %s`, %s.\n\n", pkg.group, k.t.name, scope)
		fmt.Fprintf(&b, "%s\n", k.t.doc)
		writeRules(&b, rulesOf(k.t.markers))
		queue := []string{k.t.name}
		for len(queue) > 0 {
			name := queue[0]
			queue = queue[1:]
			t := pkg.types[name]
			if t == nil || done[name] {
				continue
			}
			done[name] = true
			if t.strct == nil {
				if len(t.values) > 0 {
					enums = append(enums, t)
				}
				continue
			}
			fields, err := fieldsOf(pkg, t)
			if err != nil {
				return nil, err
			}
			if name != k.t.name {
				fmt.Fprintf(&b, "\n### %s\n\n%s\n", name, t.doc)
				writeRules(&b, rulesOf(t.markers))
			}
			fmt.Fprintf(&b, "\n| field | type | description |\n|---|---|---|\n")
			for _, f := range fields {
				doc := f.doc
				if f.required {
					doc = "**required.** " + doc
				}
				fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.name, f.typ, cell(doc))
				queue = append(queue, f.refs...)
			}
		}
	}
	if len(enums) > 0 {
		sort.Slice(enums, func(i, j int) bool { return enums[i].name < enums[j].name })
		fmt.Fprintf(&b, "\n## Enumerations\n")
		for _, t := range enums {
			fmt.Fprintf(&b, "\n### %s\n\n%s\n\n| value | meaning |\n|---|---|\n", t.name, t.doc)
			for _, v := range t.values {
				fmt.Fprintf(&b, "| `%s` | %s |\n", v.value, cell(v.doc))
			}
		}
	}
	return b.Bytes(), nil
}

// defaultDocs describe the fields every kind has, which carry no doc comment of their own.
var defaultDocs = map[string]string{
	"metadata": "Standard object metadata: name, labels, annotations.",
	"spec":     "The object's specification.",
	"status":   "What gpu-scheduler's components observed and did; written by them, not by users.",
}

// writeRules lists the messages of a type's validation rules.
func writeRules(b *bytes.Buffer, rules []string) {
	if len(rules) == 0 {
		return
	}
	fmt.Fprintf(b, "\nThe API server rejects an object that breaks one of these rules, with this message:\n\n")
	for _, r := range rules {
		fmt.Fprintf(b, "- %s\n", r)
	}
}

// fieldsOf returns a struct's documented fields; embedded TypeMeta and ListMeta say nothing a
// reader needs, metadata is the usual ObjectMeta.
func fieldsOf(pkg *apiPackage, t *typeInfo) ([]field, error) {
	var fields []field
	for _, f := range t.strct.Fields.List {
		tag := ""
		if f.Tag != nil {
			tag = f.Tag.Value
		}
		jsonName, inline := jsonTag(tag)
		if inline || jsonName == "-" {
			continue
		}
		if jsonName == "" {
			if len(f.Names) == 0 {
				return nil, fmt.Errorf("%s: an embedded field without a json name", t.name)
			}
			return nil, fmt.Errorf("%s.%s has no json tag", t.name, f.Names[0].Name)
		}
		markers := markersOf(f.Doc)
		typ, refs := typeString(pkg, f.Type)
		doc := docText(f.Doc)
		if doc == "" {
			doc = defaultDocs[jsonName]
		}
		if extra := constraints(markers); extra != "" {
			doc = strings.TrimSpace(doc + " " + extra)
		}
		fields = append(fields, field{
			name:     jsonName,
			typ:      typ,
			doc:      doc,
			required: hasMarker(markers, "required") || (!hasMarker(markers, "optional") && !strings.Contains(tag, "omitempty")),
			refs:     refs,
		})
	}
	return fields, nil
}

var tagPattern = regexp.MustCompile(`json:"([^"]*)"`)

// jsonTag returns a field's JSON name and whether it is inlined.
func jsonTag(tag string) (name string, inline bool) {
	m := tagPattern.FindStringSubmatch(tag)
	if m == nil {
		return "", false
	}
	parts := strings.Split(m[1], ",")
	for _, p := range parts[1:] {
		if p == "inline" {
			return parts[0], true
		}
	}
	return parts[0], false
}

// typeString names a field's type for a reader, linking the API's own types, and returns the
// API types it names.
func typeString(pkg *apiPackage, expr ast.Expr) (string, []string) {
	switch e := expr.(type) {
	case *ast.StarExpr:
		return typeString(pkg, e.X)
	case *ast.ArrayType:
		s, refs := typeString(pkg, e.Elt)
		return "[]" + s, refs
	case *ast.MapType:
		k, _ := typeString(pkg, e.Key)
		v, refs := typeString(pkg, e.Value)
		return "map[" + k + "]" + v, refs
	case *ast.SelectorExpr:
		pkgName := fmt.Sprint(e.X)
		return fmt.Sprintf("%s.%s", pkgName, e.Sel.Name), nil
	case *ast.Ident:
		t := pkg.types[e.Name]
		if t == nil {
			return e.Name, nil
		}
		if t.strct == nil && len(t.values) > 0 {
			return fmt.Sprintf("[%s](#%s) (string)", e.Name, anchor(e.Name)), []string{e.Name}
		}
		if t.strct == nil {
			s, refs := typeString(pkg, t.under)
			return s, refs
		}
		return fmt.Sprintf("[%s](#%s)", e.Name, anchor(e.Name)), []string{e.Name}
	}
	return fmt.Sprintf("%T", expr), nil
}

// constraints turns a field's validation markers into words.
func constraints(markers []string) string {
	var parts []string
	for _, m := range markers {
		key, value, _ := strings.Cut(m, "=")
		switch key {
		case "kubebuilder:default":
			parts = append(parts, "Default: `"+value+"`.")
		case "kubebuilder:validation:Minimum":
			parts = append(parts, "Minimum "+value+".")
		case "kubebuilder:validation:Maximum":
			parts = append(parts, "Maximum "+value+".")
		case "kubebuilder:validation:MinLength":
			parts = append(parts, "At least "+value+" characters.")
		case "kubebuilder:validation:MaxLength":
			parts = append(parts, "At most "+value+" characters.")
		case "kubebuilder:validation:MaxItems":
			parts = append(parts, "At most "+value+" items.")
		case "kubebuilder:validation:items:Minimum":
			parts = append(parts, "Each item at least "+value+".")
		case "kubebuilder:validation:items:Maximum":
			parts = append(parts, "Each item at most "+value+".")
		case "listType":
			switch value {
			case "map":
				parts = append(parts, "A list keyed by "+listMapKeys(markers)+".")
			case "set":
				parts = append(parts, "Items are unique.")
			}
		}
	}
	parts = append(parts, rulesOf(markers)...)
	return strings.Join(parts, " ")
}

// listMapKeys returns the +listMapKey values of a field, in backticks.
func listMapKeys(markers []string) string {
	var keys []string
	for _, m := range markers {
		if k, ok := strings.CutPrefix(m, "listMapKey="); ok {
			keys = append(keys, "`"+k+"`")
		}
	}
	return strings.Join(keys, " and ")
}

var messagePattern = regexp.MustCompile(`message="((?:[^"\\]|\\.)*)"`)

// rulesOf returns the messages of a type's or field's CEL validation rules: what the API server
// answers when one fails, which is what a reader needs to know.
func rulesOf(markers []string) []string {
	var rules []string
	for _, m := range markers {
		if !strings.HasPrefix(m, "kubebuilder:validation:XValidation:") {
			continue
		}
		if msg := messagePattern.FindStringSubmatch(m); msg != nil {
			rules = append(rules, msg[1]+".")
		}
	}
	return rules
}

func hasMarker(markers []string, want string) bool {
	for _, m := range markers {
		if m == want {
			return true
		}
	}
	return false
}

// anchor is the fragment GitHub gives a heading.
func anchor(heading string) string {
	return strings.ToLower(heading)
}

// cell makes text safe inside a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// firstSentence is the text up to its first full stop followed by a space.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
