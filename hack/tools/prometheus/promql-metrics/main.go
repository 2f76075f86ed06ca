// Command promql-metrics lists the metric names that Prometheus rule files and Grafana
// dashboards read, using Prometheus's own rule-file and PromQL parsers, so that a test can check
// each name against a scrape of the running components. Rule files are validated as promtool
// check rules validates them (rulefmt.ParseFile: YAML, PromQL, templates); any error fails.
//
//	promql-metrics rules.yaml dashboard.json ...
//
// prints one name per line, sorted; a .json file is a Grafana dashboard whose panels' targets
// hold the expressions ($variables are replaced by placeholders before parsing).
package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: promql-metrics FILE.yaml|FILE.json ...")
		os.Exit(2)
	}
	names := map[string]bool{}
	p := parser.NewParser(parser.Options{})
	failed := false
	for _, file := range os.Args[1:] {
		var exprs []string
		var err error
		if strings.HasSuffix(file, ".json") {
			exprs, err = dashboardExprs(file)
		} else {
			exprs, err = ruleExprs(file, p)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			failed = true
			continue
		}
		if len(exprs) == 0 {
			fmt.Fprintf(os.Stderr, "%s: no expressions\n", file)
			failed = true
		}
		for _, e := range exprs {
			if err := collect(p, e, names); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", file, err)
				failed = true
			}
		}
	}
	if failed {
		os.Exit(1)
	}
	out := make([]string, 0, len(names))
	for n := range names {
		out = append(out, n)
	}
	sort.Strings(out)
	for _, n := range out {
		fmt.Println(n)
	}
}

// ruleExprs validates a rule-groups file and returns its expressions.
func ruleExprs(file string, p parser.Parser) ([]string, error) {
	rgs, errs := rulefmt.ParseFile(file, false, model.UTF8Validation, p, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return nil, fmt.Errorf("%s: %s", file, strings.Join(msgs, "; "))
	}
	var exprs []string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	return exprs, nil
}

// grafanaVar matches $name, ${name} and ${name:format}.
var grafanaVar = regexp.MustCompile(`\$\{[^}]+\}|\$[A-Za-z_][A-Za-z0-9_]*`)

// dashboardExprs returns the "expr" of every target of every panel, rows' panels included.
func dashboardExprs(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		return nil, fmt.Errorf("%s: not a Grafana dashboard: %w", file, err)
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				if t.Expr == "" {
					continue
				}
				// Range variables become a duration, others a label value.
				e := strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h").Replace(t.Expr)
				exprs = append(exprs, grafanaVar.ReplaceAllString(e, "grafana-variable"))
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	return exprs, nil
}

type panel struct {
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// collect adds the metric names the expression selects.
func collect(p parser.Parser, expr string, names map[string]bool) error {
	e, err := p.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("expression %q: %w", expr, err)
	}
	var missing error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel {
					name = m.Value
				}
			}
		}
		if name == "" {
			missing = fmt.Errorf("expression %q selects series without a metric name", expr)
			return nil
		}
		names[name] = true
		return nil
	})
	return missing
}
