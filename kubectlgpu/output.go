package kubectlgpu

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
	"sigs.k8s.io/yaml"
)

// Output formats follow kubectl's: wide, json, yaml, name, jsonpath=TEMPLATE,
// jsonpath-file is left out (a template on the command line does the same), and
// custom-columns=HEADER:JSONPATH,... . A list prints as a List, as kubectl's does.
const outputHelp = "output format: wide, json, yaml, name, jsonpath=TEMPLATE or custom-columns=HEADER:JSONPATH,..."

// printData writes v in the --output format when that is a data format; it reports whether it
// did. resource names the items for -o name (gpuclaim, node, ...).
func (o *Options) printData(w io.Writer, resource string, v any) (bool, error) {
	format, arg, _ := strings.Cut(o.Output, "=")
	switch format {
	case "", "wide":
		return false, nil
	case "json", "yaml", "name", "jsonpath", "custom-columns":
	default:
		return false, fmt.Errorf("unknown --output %q: want %s", o.Output, strings.TrimPrefix(outputHelp, "output format: "))
	}
	obj, items, err := asObject(v)
	if err != nil {
		return true, err
	}
	switch format {
	case "json", "yaml":
		if obj.GetKind() == "" {
			// A view that is no API object (status, explain): kubectl's printers refuse an
			// object without apiVersion and kind, so it is encoded as it is.
			return true, printPlain(w, format, obj.Object)
		}
		if format == "json" {
			return true, (&printers.JSONPrinter{}).PrintObj(obj, w)
		}
		return true, (&printers.YAMLPrinter{}).PrintObj(obj, w)
	case "name":
		for _, it := range items {
			name := nameOf(it)
			if name == "" {
				return true, fmt.Errorf("-o name: an item of %s has no name", resource)
			}
			fmt.Fprintf(w, "%s/%s\n", resource, name)
		}
		return true, nil
	case "jsonpath":
		if arg == "" {
			return true, fmt.Errorf("-o jsonpath needs a template: -o jsonpath='{.items[*].name}'")
		}
		p, err := printers.NewJSONPathPrinter(arg)
		if err != nil {
			return true, fmt.Errorf("-o jsonpath: %w", err)
		}
		return true, p.PrintObj(obj, w)
	default: // custom-columns
		return true, o.printColumns(w, arg, items)
	}
}

// printPlain writes v as indented JSON or as YAML.
func printPlain(w io.Writer, format string, v any) error {
	var out []byte
	var err error
	if format == "json" {
		out, err = json.MarshalIndent(v, "", "    ")
		out = append(out, '\n')
	} else {
		out, err = yaml.Marshal(v)
	}
	if err != nil {
		return fmt.Errorf("encoding output: %w", err)
	}
	_, err = w.Write(out)
	return err
}

// asObject turns v into what kubectl's printers take: one object, or a List of the items of a
// slice. items are the objects one by one.
func asObject(v any) (*unstructured.Unstructured, []map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding output: %w", err)
	}
	if reflect.ValueOf(v).Kind() == reflect.Slice {
		var items []map[string]any
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, nil, fmt.Errorf("encoding output: %w", err)
		}
		list := make([]any, len(items))
		for i := range items {
			list[i] = items[i]
		}
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "List", "items": list}}, items, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("encoding output: %w", err)
	}
	return &unstructured.Unstructured{Object: m}, []map[string]any{m}, nil
}

// nameOf is an item's metadata.name, or its name field for the views that are no API objects.
func nameOf(item map[string]any) string {
	if md, ok := item["metadata"].(map[string]any); ok {
		if n, ok := md["name"].(string); ok {
			return n
		}
	}
	if n, ok := item["name"].(string); ok {
		return n
	}
	return ""
}

// printColumns prints -o custom-columns=HEADER:JSONPATH,...: one row per item, each column the
// JSONPath's value (<none> when it has none), as kubectl does.
func (o *Options) printColumns(w io.Writer, spec string, items []map[string]any) error {
	type column struct {
		header string
		path   *jsonpath.JSONPath
	}
	var cols []column
	for _, part := range strings.Split(spec, ",") {
		header, expr, ok := strings.Cut(part, ":")
		if !ok || header == "" || expr == "" {
			return fmt.Errorf("-o custom-columns: %q is not HEADER:JSONPATH", part)
		}
		if !strings.HasPrefix(expr, "{") {
			expr = "{" + expr + "}"
		}
		p := jsonpath.New(header).AllowMissingKeys(true)
		if err := p.Parse(expr); err != nil {
			return fmt.Errorf("-o custom-columns: column %s: %w", header, err)
		}
		cols = append(cols, column{header: header, path: p})
	}
	tw := tabwriter.NewWriter(o.tableOut(w), 0, 4, 2, ' ', 0)
	headers := make([]string, len(cols))
	for i, c := range cols {
		headers[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, it := range items {
		cells := make([]string, len(cols))
		for i, c := range cols {
			var b bytes.Buffer
			if err := c.path.Execute(&b, it); err != nil {
				return fmt.Errorf("-o custom-columns: column %s: %w", c.header, err)
			}
			cells[i] = b.String()
			if cells[i] == "" {
				cells[i] = "<none>"
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// tableOut is where a table goes: w, less the table's header line with --no-headers.
func (o *Options) tableOut(w io.Writer) io.Writer {
	if o.NoHeaders {
		return &headless{w: w}
	}
	return w
}

// headless drops the first line written through it: a table's header.
type headless struct {
	w       io.Writer
	dropped bool
}

func (h *headless) Write(p []byte) (int, error) {
	n := len(p)
	if !h.dropped {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			return n, nil
		}
		h.dropped = true
		p = p[i+1:]
	}
	if _, err := h.w.Write(p); err != nil {
		return 0, err
	}
	return n, nil
}
