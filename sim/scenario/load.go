package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"
)

// FieldError is one problem in a scenario file.
type FieldError struct {
	// Line in the file (1-based); 0 when the field is absent.
	Line int
	// Path is the field, e.g. spec.workload.mix[0].claim.count.
	Path string
	// Msg says what is wrong and how to fix it.
	Msg string
}

// Error lists every problem of one file, one per line, in file order.
type Error struct {
	File string
	Errs []FieldError
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, fe := range e.Errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if fe.Line > 0 {
			b.WriteString(":" + strconv.Itoa(fe.Line))
		}
		b.WriteString(": ")
		if fe.Path != "" {
			b.WriteString(fe.Path + ": ")
		}
		b.WriteString(fe.Msg)
	}
	return b.String()
}

// LoadFile reads, strictly decodes, defaults and validates one scenario file.
func LoadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario %s: %w", path, err)
	}
	return Load(path, data)
}

// Load decodes data (named file in errors): unknown fields, wrong types, invalid values and
// impossible combinations are all reported, each with its line, field path and a fix.
func Load(file string, data []byte) (*Scenario, error) {
	var doc yamlv3.Node
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: file, Errs: []FieldError{{Msg: "the file is empty; start from scenarios/quickstart.yaml"}}}
		}
		return nil, &Error{File: file, Errs: []FieldError{{Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}}
	}
	var extra yamlv3.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{File: file, Errs: []FieldError{{Line: extra.Line, Msg: "a second YAML document; put one scenario in each file"}}}
	}
	c := &checker{lines: map[string]int{}}
	root := &doc
	if root.Kind == yamlv3.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	c.walk(root, reflect.TypeOf(Scenario{}), "")
	if len(c.errs) > 0 {
		return nil, c.result(file)
	}
	var s Scenario
	if err := yaml.Unmarshal(data, &s); err != nil {
		// The walk checked every field's type, so this is unexpected; still report it.
		return nil, &Error{File: file, Errs: []FieldError{{Msg: err.Error()}}}
	}
	if s.Spec.Workload.TraceFile != nil {
		if err := c.loadTrace(file, &s); err != nil {
			return nil, err
		}
		if len(c.errs) > 0 {
			return nil, c.result(file)
		}
	}
	c.resolveHardware(file, &s)
	s.Default()
	c.validate(&s)
	if len(c.errs) > 0 {
		return nil, c.result(file)
	}
	return &s, nil
}

// checker collects errors and remembers the line of every field path it saw.
type checker struct {
	lines map[string]int
	errs  []FieldError
}

func (c *checker) add(path, format string, args ...any) {
	c.errs = append(c.errs, FieldError{Line: c.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// line finds the line of path, or of its closest present parent (a missing field is reported
// at the object that should hold it).
func (c *checker) line(path string) int {
	for p := path; p != ""; {
		if l, ok := c.lines[p]; ok {
			return l
		}
		i := max(strings.LastIndexByte(p, '.'), strings.LastIndexByte(p, '['))
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

func (c *checker) result(file string) error {
	sort.SliceStable(c.errs, func(i, j int) bool { return c.errs[i].Line < c.errs[j].Line })
	return &Error{File: file, Errs: c.errs}
}

var durationType = reflect.TypeOf(Duration{})

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// jsonFields maps a struct's JSON names to its fields.
func jsonFields(t reflect.Type) (map[string]reflect.StructField, []string) {
	fields := map[string]reflect.StructField{}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f
		names = append(names, name)
	}
	return fields, names
}

// walk checks node against Go type t: only known fields, the right YAML kinds and scalar types.
func (c *checker) walk(n *yamlv3.Node, t reflect.Type, path string) {
	if n.Kind == yamlv3.AliasNode {
		n = n.Alias
	}
	if path != "" {
		c.lines[path] = n.Line
	}
	if n.Kind == yamlv3.ScalarNode && n.Tag == "!!null" {
		return // absent
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	where := path
	if where == "" {
		where = "the document"
	}
	if t == durationType {
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!str" {
			c.add(path, "must be a duration string like \"30s\" or \"1m30s\", got %s", describe(n))
		}
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yamlv3.MappingNode {
			c.add(path, "must be an object with fields, got %s", describe(n))
			return
		}
		fields, names := jsonFields(t)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			fp := join(path, k.Value)
			f, ok := fields[k.Value]
			if !ok {
				c.lines[fp] = k.Line
				c.add(fp, "unknown field %q in %s; known fields: %s", k.Value, where, strings.Join(names, ", "))
				continue
			}
			if seen[k.Value] {
				c.lines[fp] = k.Line
				c.add(fp, "field %q appears twice; keep one", k.Value)
				continue
			}
			seen[k.Value] = true
			c.walk(v, f.Type, fp)
		}
	case reflect.Map:
		if n.Kind != yamlv3.MappingNode {
			c.add(path, "must be a map of key: value, got %s", describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			fp := path + "[" + strconv.Quote(k.Value) + "]"
			c.lines[fp] = k.Line
			c.walk(v, t.Elem(), fp)
		}
	case reflect.Slice:
		if n.Kind != yamlv3.SequenceNode {
			c.add(path, "must be a list (items starting with \"- \"), got %s", describe(n))
			return
		}
		for i, item := range n.Content {
			c.walk(item, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
	case reflect.String:
		if n.Kind != yamlv3.ScalarNode {
			c.add(path, "must be a string, got %s", describe(n))
		} else if n.Tag != "!!str" {
			c.add(path, "must be a string, got %s; quote it: %q", describe(n), n.Value)
		}
	case reflect.Int, reflect.Int32, reflect.Int64:
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!int" {
			c.add(path, "must be a whole number, got %s", describe(n))
		}
	case reflect.Float64:
		if n.Kind != yamlv3.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
			c.add(path, "must be a number, got %s", describe(n))
		}
	case reflect.Bool:
		if n.Kind != yamlv3.ScalarNode || n.Tag != "!!bool" {
			c.add(path, "must be true or false, got %s", describe(n))
		}
	}
}

func describe(n *yamlv3.Node) string {
	switch n.Kind {
	case yamlv3.MappingNode:
		return "an object"
	case yamlv3.SequenceNode:
		return "a list"
	}
	switch n.Tag {
	case "!!str":
		return fmt.Sprintf("the string %q", n.Value)
	case "!!int", "!!float":
		return "the number " + n.Value
	case "!!bool":
		return n.Value
	}
	return fmt.Sprintf("%q", n.Value)
}
