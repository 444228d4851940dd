// Package monitoring_test holds what Toolgate ships for monitoring to its metrics: the alerting rules
// of config/prometheus/rules.yaml are loaded by Prometheus' own rule parser, and every PromQL
// expression of the rules and of the Grafana dashboard config/grafana/toolgate-dashboard.json is
// parsed by Prometheus' PromQL parser; every metric they select is one Toolgate registers (read from
// its source, as test/docstest reads it) or a controller-runtime metric listed here, with labels it
// has; the gauges every replica exports alike are aggregated with max; and docs/metrics.md lists
// exactly the alerts of the rule file. (Its own package: Prometheus is a large module that nothing
// else of Toolgate imports.)
package monitoring_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"toolgate.dev/toolgate/test/metricnames"
	"toolgate.dev/toolgate/test/testenv"
)

const (
	rulesFile     = "config/prometheus/rules.yaml"
	dashboardFile = "config/grafana/toolgate-dashboard.json"
)

// standardMetrics are the metrics of controller-runtime (and its work queues) the rules and the
// dashboard may use, with their labels.
var standardMetrics = map[string][]string{
	"controller_runtime_reconcile_errors_total": {"controller"},
	"controller_runtime_reconcile_total":        {"controller", "result"},
	"workqueue_depth":                           {"name", "controller"},
	"leader_election_master_status":             {"name"},
}

// replicatedGauges are computed from the cache by every replica alike: summing them across Pods
// would count each call once per replica.
var replicatedGauges = []string{"toolgate_toolcalls", "toolgate_ended_toolcalls_without_receipt", "toolgate_oldest_waiting_toolcall_seconds", "toolgate_provider_ready"}

// grafanaVariables are what the dashboard's variables stand for when its queries are parsed.
var grafanaVariables = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${namespace}", ".*", "$namespace", ".*")

func TestRulesLoadAndUseToolgatesMetrics(t *testing.T) {
	g := NewWithT(t)
	known := knownMetrics(t)
	groups, errs := rulefmt.ParseFile(filepath.Join(repoRoot(t), rulesFile), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.Default())
	g.Expect(errs).To(BeEmpty(), "Prometheus refuses %s", rulesFile)
	alerts := alertNames(t)
	g.Expect(alerts).To(ContainElements(
		"ToolgateProviderNotReady", "ToolgateProviderUnreachable", "ToolgateProviderCredentialRejected",
		"ToolgateUntrustedProviderAnswers", "ToolgateToolCallWaitingLong", "ToolgateCallsEndingWithoutDecision",
		"ToolgateReconcileErrors"))
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			g.Expect(r.Alert).NotTo(BeEmpty(), "group %s: the file holds alerting rules only", grp.Name)
			g.Expect(r.Labels).To(HaveKey("severity"), "alert %s", r.Alert)
			g.Expect(r.Annotations).To(HaveKey("summary"), "alert %s", r.Alert)
			checkExpr(t, known, "alert "+r.Alert, r.Expr)
		}
	}
}

func TestDashboardQueriesUseToolgatesMetrics(t *testing.T) {
	g := NewWithT(t)
	known := knownMetrics(t)
	var dash struct {
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	data, err := os.ReadFile(filepath.Join(repoRoot(t), dashboardFile))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(data, &dash)).To(Succeed(), "%s is not valid JSON", dashboardFile)
	g.Expect(dash.UID).NotTo(BeEmpty())

	var used []string
	var count int
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			g.Expect(p.Targets).NotTo(BeEmpty(), "panel %q has no query", p.Title)
			for _, tg := range p.Targets {
				count++
				used = append(used, checkExpr(t, known, fmt.Sprintf("panel %q", p.Title), grafanaVariables.Replace(tg.Expr))...)
			}
		}
	}
	walk(dash.Panels)
	g.Expect(count).To(BeNumerically(">", 10))
	g.Expect(used).To(ContainElements(
		"toolgate_toolcalls_total", "toolgate_toolcalls", "toolgate_oldest_waiting_toolcall_seconds",
		"toolgate_provider_requests_total", "toolgate_provider_request_errors_total", "toolgate_provider_ready",
		"toolgate_approval_wait_seconds_bucket", "toolgate_mcp_calls_total"), "the dashboard shows each of the day-2 signals")

	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := regexp.MustCompile(`^label_values\(([a-z_:]+), *([a-z_]+)\)$`).FindStringSubmatch(v.Definition)
		g.Expect(m).NotTo(BeNil(), "variable %s: label_values(metric, label)", v.Name)
		labels, ok := known[m[1]]
		g.Expect(ok).To(BeTrue(), "variable %s reads %s, which is not registered", v.Name, m[1])
		g.Expect(labels).To(ContainElement(m[2]), "variable %s: %s has no label %s", v.Name, m[1], m[2])
	}
}

// The alerts of the rule file are the ones docs/metrics.md lists, each once.
func TestMetricsDocListsEveryAlert(t *testing.T) {
	g := NewWithT(t)
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs/metrics.md"))
	g.Expect(err).NotTo(HaveOccurred())
	var listed []string
	for _, m := range regexp.MustCompile("(?m)^- \\*\\*`(Toolgate[A-Za-z]+)`\\*\\*").FindAllStringSubmatch(string(doc), -1) {
		listed = append(listed, m[1])
	}
	alerts := alertNames(t)
	g.Expect(listed).To(ConsistOf(alerts), "docs/metrics.md lists each alert of %s as a bullet - **`Name`**: what to do", rulesFile)
	g.Expect(string(doc)).To(ContainSubstring("](../" + rulesFile + ")"))
	g.Expect(string(doc)).To(ContainSubstring("](../" + dashboardFile + ")"))
}

type panel struct {
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// checkExpr parses expr with Prometheus' parser and checks every metric it selects: registered, with
// the labels it matches and groups by, and a replicated gauge aggregated with max or min. It returns
// the metric names it selects.
func checkExpr(t *testing.T, known map[string][]string, where, expr string) []string {
	t.Helper()
	g := NewWithT(t)
	g.Expect(expr).NotTo(ContainSubstring("$"), "%s: a Grafana variable left in the query", where)
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	g.Expect(err).NotTo(HaveOccurred(), "%s: %s", where, expr)
	var names []string
	parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := n.Name
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName {
					name = m.Value
				}
			}
			names = append(names, name)
			have, ok := known[name]
			g.Expect(ok).To(BeTrue(), "%s selects %s, which Toolgate does not register and which is not a standard metric listed in test/monitoring", where, name)
			for _, m := range n.LabelMatchers {
				if m.Name != labels.MetricName {
					g.Expect(have).To(ContainElement(m.Name), "%s: %s has no label %s", where, name, m.Name)
				}
			}
			if slices.Contains(replicatedGauges, name) {
				var inner *parser.AggregateExpr
				for _, a := range path {
					if agg, ok := a.(*parser.AggregateExpr); ok {
						inner = agg
					}
				}
				g.Expect(inner).NotTo(BeNil(), "%s: %s is the same on every replica; aggregate it with max", where, name)
				if inner != nil {
					g.Expect(inner.Op).To(BeElementOf(parser.ItemType(parser.MAX), parser.ItemType(parser.MIN)), "%s: %s is the same on every replica; aggregate it with max, never %s", where, name, inner.Op)
				}
			}
		case *parser.AggregateExpr:
			if n.Without {
				break
			}
			for _, sel := range selectorsIn(n.Expr) {
				for _, l := range n.Grouping {
					g.Expect(append(known[sel], "le")).To(ContainElement(l), "%s: groups %s by %s, a label it does not have", where, sel, l)
				}
			}
		}
		return nil
	})
	return names
}

// selectorsIn are the metric names e selects.
func selectorsIn(e parser.Expr) []string {
	var out []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs.Name)
		}
		return nil
	})
	return out
}

// knownMetrics are the metrics Toolgate registers, with the series names a histogram exports, and the
// standard ones, each with its labels.
func knownMetrics(t *testing.T) map[string][]string {
	t.Helper()
	registered, err := metricnames.Registered(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, m := range registered {
		out[m.Name] = m.Labels
		if m.Kind == "histogram" {
			out[m.Name+"_bucket"] = m.Labels
			out[m.Name+"_sum"] = m.Labels
			out[m.Name+"_count"] = m.Labels
		}
	}
	for name, l := range standardMetrics {
		out[name] = l
	}
	return out
}

// alertNames are the alerts of the rule file.
func alertNames(t *testing.T) []string {
	t.Helper()
	groups, errs := rulefmt.ParseFile(filepath.Join(repoRoot(t), rulesFile), false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.Default())
	if len(errs) > 0 {
		t.Fatalf("%s: %v", rulesFile, errs)
	}
	var out []string
	for _, grp := range groups.Groups {
		for _, r := range grp.Rules {
			out = append(out, r.Alert)
		}
	}
	return out
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}
