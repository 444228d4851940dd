// Package metricnames reads the metrics Toolgate registers from their source, for the tests that hold
// the documentation (test/docstest) and the shipped alerting rules and dashboard (test/monitoring) to
// them: a metric counted in one of Sources is found whether or not any series of it exists yet.
package metricnames

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// Sources are the files that register Toolgate's metrics, relative to the repository root: the
// manager's own, and each package's that counts what it does.
var Sources = []string{
	"controllers/clientmetrics.go",
	"controllers/statemetrics.go",
	"controllers/toolcalls/metrics.go",
	"controllers/receiver/receiver.go",
	"controllers/toolcalls/waiter/waiter.go",
	"internal/mcpgateway/metrics.go",
}

// Metric is a metric a source file creates: its name, its kind (counter, gauge, histogram or
// summary, from the constructor's name; "" when unknown) and its variable labels.
type Metric struct {
	Name   string
	Kind   string
	Labels []string
}

// Registered parses Sources under root for prometheus.New*(Opts{Name: "toolgate_..."}, labels).
func Registered(root string) ([]Metric, error) {
	var out []Metric
	for _, src := range Sources {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, src), nil, 0)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", src, err)
		}
		out = append(out, metricsIn(f)...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("found no toolgate_ metric in the files of metricnames.Sources; update metricsIn")
	}
	return out, nil
}

// metricsIn returns the toolgate_ metrics a file creates.
func metricsIn(f *ast.File) []Metric {
	var out []Metric
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) == 0 {
			return true
		}
		opts, ok := call.Args[0].(*ast.CompositeLit)
		if !ok {
			return true
		}
		var m Metric
		for _, e := range opts.Elts {
			kv, ok := e.(*ast.KeyValueExpr)
			if id, isID := kv.Key.(*ast.Ident); !ok || !isID || id.Name != "Name" {
				continue
			}
			if s, ok := stringLit(kv.Value); ok && strings.HasPrefix(s, "toolgate_") {
				m.Name = s
			}
		}
		if m.Name == "" {
			return true
		}
		m.Kind = kindOf(call.Fun)
		if len(call.Args) > 1 {
			if labels, ok := call.Args[1].(*ast.CompositeLit); ok {
				for _, e := range labels.Elts {
					if s, ok := stringLit(e); ok {
						m.Labels = append(m.Labels, s)
					}
				}
			}
		}
		out = append(out, m)
		return true
	})
	return out
}

// kindOf reads the kind of metric a constructor makes from its name: prometheus.NewCounterVec is a
// counter.
func kindOf(fun ast.Expr) string {
	name := ""
	switch f := fun.(type) {
	case *ast.SelectorExpr:
		name = f.Sel.Name
	case *ast.Ident:
		name = f.Name
	}
	for _, kind := range []string{"Counter", "Gauge", "Histogram", "Summary"} {
		if strings.HasPrefix(name, "New"+kind) {
			return strings.ToLower(kind)
		}
	}
	return ""
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
