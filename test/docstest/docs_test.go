// Package docs_test keeps the user documentation honest: it reads the API types, the controller's
// outcome and event tables and the manifests, and fails when docs/ no longer describes what they do.
//
//   - Every reason the API declares is in docs/troubleshooting.md; its table has a row for exactly the
//     (phase, reason) pairs of the controller's outcome table (controllers.Outcomes), and its event
//     tables give each reason of the controller's event table (controllers.Events) with its type.
//   - Every metric Toolgate registers is in docs/metrics.md with its labels, and that page names no
//     toolgate_ metric that does not exist.
//   - docs/gitops.md points at the Argo CD health checks of config/argocd instead of copying them,
//     its Flux section gives every phase the status kstatus computes for it, with no custom check,
//     and its table of Tools and providers gives every reason of their Ready condition its
//     conditions, kstatus status, Argo CD health and event, which docs/troubleshooting.md lists.
//   - The validation messages of the CRDs are quoted in docs/troubleshooting.md.
//   - The admission policies of config/admission are named in docs/troubleshooting.md.
//   - The ClusterRoles the docs bind exist in config/rbac (or config/samples).
//   - Relative links (and their #anchors) in docs/*.md, README.md and examples/*/README.md resolve.
//   - Every row of the compatibility table in docs/providers.md names a test, and every test that
//     page names exists.
package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/test/metricnames"
)

// ---------------------------------------------------------------------------------------------------
// Reasons and phases

// Every reason the API declares is described in docs/troubleshooting.md, and every reason of the
// controller's outcome and event tables is one the API declares.
func TestTroubleshootingNamesEveryReason(t *testing.T) {
	g := NewWithT(t)
	reasons := stringConsts(t, "api/v1alpha1/reasons.go", "Reason")
	declared := map[string]string{}
	for name, value := range reasons {
		declared[value] = name
	}
	for _, row := range controllers.Outcomes() {
		g.Expect(declared).To(HaveKey(row.Reason), "the outcome table records %s/%s, a reason api/v1alpha1/reasons.go does not declare", row.Phase, row.Reason)
	}
	for _, row := range controllers.Events() {
		g.Expect(declared).To(HaveKey(row.Reason), "the event table emits reason %s, which api/v1alpha1/reasons.go does not declare", row.Reason)
	}

	doc := readFile(t, "docs/troubleshooting.md")
	for name, value := range reasons {
		g.Expect(doc).To(ContainSubstring("`"+value+"`"),
			"api/v1alpha1/reasons.go declares reason %s (%q); describe it in docs/troubleshooting.md as `%s`", name, value, value)
	}
}

// The table of docs/troubleshooting.md has a row for exactly the (phase, reason) pairs of the
// controller's outcome table, and every phase has a row.
func TestTroubleshootingTableHasARowPerPhaseAndReason(t *testing.T) {
	g := NewWithT(t)
	phases := stringConsts(t, "api/v1alpha1/toolcall_types.go", "Phase")
	outcomes := controllers.Outcomes()
	g.Expect(outcomes).To(ContainElements(
		HaveField("Phase", tg.PhaseDenied), HaveField("Reason", tg.ReasonUnknownTool), HaveField("Reason", tg.ReasonInvalidTool)))

	declared := map[tg.ToolCallPhase]bool{}
	for _, p := range phases {
		declared[tg.ToolCallPhase(p)] = true
	}
	want := map[string]bool{}
	for _, row := range outcomes {
		g.Expect(declared).To(HaveKey(row.Phase), "the outcome table records phase %s, which api/v1alpha1/toolcall_types.go does not declare", row.Phase)
		want["`"+string(row.Phase)+"` `"+row.Reason+"`"] = true
	}

	got := map[string]bool{}
	for _, row := range tableRows(readFile(t, "docs/troubleshooting.md")) {
		if len(row) >= 2 && isCode(row[0]) && isCode(row[1]) {
			got[row[0]+" "+row[1]] = true
		}
	}
	for pair := range want {
		g.Expect(got).To(HaveKey(pair), "the controller records phase and reason %s; add a row for it to the table in docs/troubleshooting.md", pair)
	}
	for pair := range got {
		g.Expect(want).To(HaveKey(pair), "docs/troubleshooting.md has a row for %s, which the controller never records; remove or fix it", pair)
	}
	for _, phase := range phases {
		found := false
		for pair := range got {
			found = found || strings.HasPrefix(pair, "`"+phase+"` ")
		}
		g.Expect(found).To(BeTrue(), "phase %s has no row in the table of docs/troubleshooting.md", phase)
	}
}

// The event tables of docs/troubleshooting.md give each reason of the controller's event table with
// its type.
func TestTroubleshootingEventTablesMatchTheControllersEvents(t *testing.T) {
	g := NewWithT(t)
	documented := map[string][]string{} // reason -> the types the docs' event rows give it
	for _, row := range tableRows(readFile(t, "docs/troubleshooting.md")) {
		if len(row) >= 3 && isCode(row[0]) && (row[1] == corev1.EventTypeNormal || row[1] == corev1.EventTypeWarning) {
			reason := strings.Trim(row[0], "`")
			documented[reason] = append(documented[reason], row[1])
		}
	}
	events := controllers.Events()
	g.Expect(events).To(ContainElement(HaveField("Reason", tg.ReasonCancelFailed)))
	for _, e := range events {
		g.Expect(documented).To(HaveKeyWithValue(e.Reason, []string{e.Type}),
			"the controller emits %s events with reason %s (action %s); docs/troubleshooting.md lists it in an event table, once, as | `%s` | %s |", e.Type, e.Reason, e.Action, e.Reason, e.Type)
	}
}

// ---------------------------------------------------------------------------------------------------
// Metrics

func TestMetricsDocCoversEveryMetric(t *testing.T) {
	g := NewWithT(t)
	metrics := registeredMetrics(t)
	names := make([]string, len(metrics))
	for i, m := range metrics {
		names[i] = m.Name
	}
	g.Expect(names).To(ContainElements("toolgate_toolcalls_total", "toolgate_apiserver_writes_total"))

	doc := readFile(t, "docs/metrics.md")
	rows := map[string][]string{}
	for _, row := range tableRows(doc) {
		if len(row) > 0 && isCode(row[0]) {
			rows[strings.Trim(row[0], "`")] = row
		}
	}
	for _, m := range metrics {
		row, ok := rows[m.Name]
		g.Expect(ok).To(BeTrue(), "%s is registered (metricnames.Sources); add a table row for it to docs/metrics.md", m.Name)
		if !ok {
			continue
		}
		g.Expect(len(row)).To(BeNumerically(">=", 3), "the row of %s in docs/metrics.md needs name, type and labels columns", m.Name)
		for _, l := range m.Labels {
			g.Expect(row[2]).To(ContainSubstring("`"+l+"`"), "docs/metrics.md: the labels column of %s must name label %q", m.Name, l)
		}
		if len(m.Labels) == 0 {
			g.Expect(row[2]).To(Equal("—"), "docs/metrics.md: %s has no labels; its labels column must say —", m.Name)
		}
	}

	mentioned := regexp.MustCompile(`\btoolgate_[a-z0-9_]+`).FindAllString(doc, -1)
	g.Expect(mentioned).NotTo(BeEmpty())
	for _, name := range mentioned {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if trimmed, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(names, trimmed) {
				base = trimmed
			}
		}
		g.Expect(names).To(ContainElement(base), "docs/metrics.md mentions %s, which no file of metricnames.Sources registers", name)
	}
}

// registeredMetrics are the metrics the files of metricnames.Sources register.
func registeredMetrics(t *testing.T) []metricnames.Metric {
	t.Helper()
	out, err := metricnames.Registered(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ---------------------------------------------------------------------------------------------------
// GitOps health checks

// docs/gitops.md points at the Argo CD health checks of config/argocd, and at the Component that
// installs them, rather than copying the scripts: no code block of the docs holds one. What the
// checks decide is tested where they are run with Argo CD's Lua interpreter (test/argohealth, over
// their test cases; controllers/toolcalls, over every row of the outcome table;
// controllers/internal/readiness, over every reason of Ready).
func TestArgoCDHealthChecksArePointedAtNotCopied(t *testing.T) {
	g := NewWithT(t)
	doc := readFile(t, "docs/gitops.md")
	g.Expect(doc).To(ContainSubstring("](../config/argocd/resource_customizations/toolgate.dev)"))
	g.Expect(doc).To(ContainSubstring("](../config/argocd)"))
	var ks struct {
		Components []string `json:"components"`
	}
	g.Expect(yaml.Unmarshal([]byte(codeBlockContaining(t, "docs/gitops.md", "components:")), &ks)).To(Succeed())
	g.Expect(ks.Components).To(ConsistOf(HaveSuffix("/config/argocd")))
	for _, rel := range markdownFiles(t) {
		for _, b := range codeBlocks(readFile(t, rel)) {
			g.Expect(b).NotTo(ContainSubstring("local hs ="), "%s copies a health check: point at config/argocd instead", rel)
		}
	}
}

// The Tools and providers table of docs/gitops.md gives every reason of their Ready condition
// (controllers.Readiness) the conditions, kstatus status, Argo CD health and event type the manager
// gives it, and the event table of docs/troubleshooting.md lists each reason with its type.
func TestGitOpsTableGivesEveryReadyReason(t *testing.T) {
	g := NewWithT(t)
	rows := controllers.Readiness()
	g.Expect(rows).To(ContainElement(HaveField("Reason", tg.ReasonCredentialRejected)))
	var table [][]string
	for _, row := range tableRows(readFile(t, "docs/gitops.md")) {
		if len(row) == 6 && isCode(row[1]) {
			table = append(table, row)
		}
	}
	conditionTrue := map[string]string{"Current": "Ready=True", "InProgress": "Reconciling=True", "Failed": "Stalled=True"}
	events := map[string][]string{}
	for _, row := range tableRows(readFile(t, "docs/troubleshooting.md")) {
		if len(row) >= 3 && isCode(row[0]) && (row[1] == corev1.EventTypeNormal || row[1] == corev1.EventTypeWarning) {
			events[strings.Trim(row[0], "`")] = append(events[strings.Trim(row[0], "`")], row[1])
		}
	}
	for _, r := range rows {
		var found []string
		for _, cells := range table {
			if cells[1] == "`"+r.Reason+"`" && strings.Contains(cells[0], "`"+r.Kind+"`") {
				found = cells
			}
		}
		g.Expect(found).NotTo(BeNil(), "docs/gitops.md: no row for %s's Ready reason %s", r.Kind, r.Reason)
		if found == nil {
			continue
		}
		g.Expect(found[2]).To(ContainSubstring("`"+conditionTrue[r.Progress.Kstatus()]+"`"), "%s %s", r.Kind, r.Reason)
		g.Expect(strings.Count(found[2], "=True")).To(Equal(1), "%s %s: one of Ready, Reconciling and Stalled is True", r.Kind, r.Reason)
		g.Expect(found[3]).To(Equal("`"+r.Progress.Kstatus()+"`"), "%s %s", r.Kind, r.Reason)
		g.Expect(found[4]).To(Equal("`"+r.Progress.ArgoCD()+"`"), "%s %s", r.Kind, r.Reason)
		g.Expect(found[5]).To(Equal(r.Progress.EventType()), "%s %s", r.Kind, r.Reason)
		g.Expect(events).To(HaveKeyWithValue(r.Reason, []string{r.Progress.EventType()}),
			"docs/troubleshooting.md lists the event of Ready changing to %s in an event table, once, as | `%s` | %s |", r.Reason, r.Reason, r.Progress.EventType())
	}
}

// The Flux Kustomization in docs/gitops.md waits with plain kstatus (no healthCheckExprs), and the
// kstatus table there gives every phase the status kstatus computes for it (controllers/toolcalls/status_test.go
// computes it with kstatus itself).
func TestFluxSectionSaysWhatKstatusReports(t *testing.T) {
	g := NewWithT(t)
	var ks struct {
		Kind string `json:"kind"`
		Spec struct {
			Wait             bool  `json:"wait"`
			HealthCheckExprs []any `json:"healthCheckExprs"`
		} `json:"spec"`
	}
	g.Expect(yaml.Unmarshal([]byte(codeBlockContaining(t, "docs/gitops.md", "apiVersion: kustomize.toolkit.fluxcd.io/")), &ks)).To(Succeed())
	g.Expect(ks.Kind).To(Equal("Kustomization"))
	g.Expect(ks.Spec.Wait).To(BeTrue())
	g.Expect(ks.Spec.HealthCheckExprs).To(BeEmpty(), "kstatus follows a ToolCall with no custom check")

	doc := readFile(t, "docs/gitops.md")
	for _, p := range stringConsts(t, "api/v1alpha1/toolcall_types.go", "Phase") {
		row := regexp.MustCompile("(?m)^\\|[^\\n]*`" + p + "`[^\\n]*\\| `(InProgress|Current|Failed)` \\|$").FindStringSubmatch(doc)
		g.Expect(row).NotTo(BeNil(), "docs/gitops.md: no kstatus row for phase %s", p)
		g.Expect(row[1]).To(Equal(expectedKstatus(tg.ToolCallPhase(p))), "phase %s", p)
	}
}

func expectedKstatus(p tg.ToolCallPhase) string {
	switch {
	case p == tg.PhaseSucceeded:
		return "Current"
	case p.IsTerminal():
		return "Failed"
	}
	return "InProgress"
}

// ---------------------------------------------------------------------------------------------------
// Validation messages and roles

func TestTroubleshootingQuotesEveryValidationMessage(t *testing.T) {
	g := NewWithT(t)
	doc := readFile(t, "docs/troubleshooting.md")
	gitops := readFile(t, "docs/gitops.md")
	re := regexp.MustCompile(`XValidation:.*,message="([^"]+)"`)
	var messages []string
	for _, file := range []string{"api/v1alpha1/toolcall_types.go", "api/v1alpha1/tool_types.go"} {
		for _, c := range parseFile(t, file).Comments {
			for _, m := range re.FindAllStringSubmatch(c.Text(), -1) {
				messages = append(messages, m[1])
			}
		}
	}
	g.Expect(messages).To(ContainElement(ContainSubstring("spec is immutable")))
	for _, m := range messages {
		g.Expect(doc).To(ContainSubstring("`"+m+"`"), "the CRD validation message %q is not quoted in the admission errors of docs/troubleshooting.md", m)
	}
	g.Expect(gitops).To(ContainSubstring("spec is immutable: what a human approved is what runs; create a new ToolCall instead"))
}

// Every admission policy config/admission ships is named in docs/troubleshooting.md, as config/default
// names it: a refusal quotes the policy's name, and the reader looks it up.
func TestTroubleshootingNamesEveryAdmissionPolicy(t *testing.T) {
	g := NewWithT(t)
	doc := readFile(t, "docs/troubleshooting.md")
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	g.Expect(yaml.Unmarshal([]byte(readFile(t, "config/admission/kustomization.yaml")), &kustomization)).To(Succeed())
	var names []string
	for _, file := range kustomization.Resources {
		for _, part := range strings.Split(readFile(t, "config/admission/"+file), "\n---") {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			g.Expect(yaml.Unmarshal([]byte(part), &obj)).To(Succeed(), file)
			if strings.HasSuffix(obj.Kind, "AdmissionPolicy") {
				names = append(names, "toolgate-"+obj.Metadata.Name)
			}
		}
	}
	g.Expect(names).To(ContainElement("toolgate-toolcall-authorization"))
	for _, name := range names {
		g.Expect(doc).To(ContainSubstring("'"+name+"'"), "docs/troubleshooting.md does not say what a refusal or warning of %s means", name)
	}
}

func TestDocumentedClusterRolesExist(t *testing.T) {
	g := NewWithT(t)
	var kustomization struct {
		Resources []string `json:"resources"`
	}
	g.Expect(yaml.Unmarshal([]byte(readFile(t, "config/rbac/kustomization.yaml")), &kustomization)).To(Succeed())
	roles := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config/rbac/*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, file := range files {
		data, err := os.ReadFile(file)
		g.Expect(err).NotTo(HaveOccurred())
		for _, doc := range strings.Split(string(data), "\n---") {
			var obj struct {
				Kind     string `json:"kind"`
				Metadata struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			g.Expect(yaml.Unmarshal([]byte(doc), &obj)).To(Succeed(), file)
			if obj.Kind != "ClusterRole" {
				continue
			}
			// config/default prefixes the names of what config/rbac/kustomization.yaml lists with
			// toolgate-; a file it does not list is applied as it is (or added to it, and prefixed).
			roles["toolgate-"+obj.Metadata.Name] = true
			if !slices.Contains(kustomization.Resources, filepath.Base(file)) {
				roles[obj.Metadata.Name] = true
			}
		}
	}
	g.Expect(roles).To(HaveKey("toolgate-toolcall-agent"))
	g.Expect(roles).NotTo(HaveKey("toolcall-agent"))
	// The samples' ClusterRoles (the grant of the sample tool), applied as they are.
	samples, err := filepath.Glob(filepath.Join(repoRoot(t), "config/samples/*_role.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, file := range samples {
		var obj struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		g.Expect(yaml.Unmarshal([]byte(readFile(t, strings.TrimPrefix(file, repoRoot(t)+"/"))), &obj)).To(Succeed(), file)
		g.Expect(obj.Kind).To(Equal("ClusterRole"), file)
		roles[obj.Metadata.Name] = true
	}
	g.Expect(roles).To(HaveKey("toolgate-call-issue-refund"))

	re := regexp.MustCompile(`--clusterrole=([a-z0-9-]+)|ClusterRole ` + "`" + `([a-z0-9-]+)` + "`")
	checked := 0
	for _, file := range markdownFiles(t) {
		for _, m := range re.FindAllStringSubmatch(readFile(t, file), -1) {
			name := m[1] + m[2]
			checked++
			g.Expect(roles).To(HaveKey(name), "%s refers to ClusterRole %s, which neither config/rbac nor config/samples defines", file, name)
		}
	}
	g.Expect(checked).To(BeNumerically(">", 0))
}

// ---------------------------------------------------------------------------------------------------
// Links

func TestRelativeLinksResolve(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	link := regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	checked := 0
	for _, file := range markdownFiles(t) {
		text := stripCode(readFile(t, file))
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, fragment, _ := strings.Cut(target, "#")
			resolved := filepath.Join(root, file)
			if path != "" {
				resolved = filepath.Join(filepath.Dir(resolved), path)
				_, err := os.Stat(resolved)
				g.Expect(err).NotTo(HaveOccurred(), "%s links to %s, which does not exist", file, target)
				if err != nil {
					continue
				}
			}
			if fragment != "" && strings.HasSuffix(resolved, ".md") {
				data, err := os.ReadFile(resolved)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(headingAnchors(string(data))).To(ContainElement(fragment),
					"%s links to %s, but that page has no heading with anchor #%s", file, target, fragment)
			}
		}
	}
	g.Expect(checked).To(BeNumerically(">", 10), "suspiciously few relative links found")
}

// headingAnchors returns the anchors GitHub gives the headings of a Markdown page.
func headingAnchors(md string) []string {
	var out []string
	seen := map[string]int{}
	for _, line := range strings.Split(stripFences(md), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') || r > 127:
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}

// ---------------------------------------------------------------------------------------------------
// Helpers

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

func readFile(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), rel))
	if err != nil {
		t.Fatalf("reading %s: %v", rel, err)
	}
	return string(data)
}

// markdownFiles returns README.md, docs/*.md and the examples' READMEs, relative to the repository
// root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	root := repoRoot(t)
	matches, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	matches = append(matches, examples...)
	files := []string{"README.md"}
	for _, m := range matches {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	for _, want := range []string{"docs/quick-start.md", "docs/gitops.md", "docs/metrics.md", "docs/troubleshooting.md", "examples/python-rest/README.md", "examples/typescript-mcp/README.md"} {
		if !slices.Contains(files, want) {
			t.Fatalf("%s is missing", want)
		}
	}
	return files
}

func parseFile(t *testing.T, rel string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(repoRoot(t), rel), nil, parser.ParseComments)
	if err != nil {
		t.Fatalf("parsing %s: %v", rel, err)
	}
	return f
}

// stringConsts returns the string constants of a file whose names start with prefix, by name.
func stringConsts(t *testing.T, rel, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, decl := range parseFile(t, rel).Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, prefix) || i >= len(vs.Values) {
					continue
				}
				if s, ok := stringLit(vs.Values[i]); ok {
					out[name.Name] = s
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no %s* string constants in %s", prefix, rel)
	}
	return out
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// tableRows returns the cells of every Markdown table row (header and separator rows included).
func tableRows(md string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(stripFences(md), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			continue
		}
		line = strings.ReplaceAll(line, `\|`, "\x00")
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.ReplaceAll(strings.TrimSpace(cells[i]), "\x00", "|")
		}
		rows = append(rows, cells)
	}
	return rows
}

func isCode(cell string) bool {
	return len(cell) > 2 && strings.HasPrefix(cell, "`") && strings.HasSuffix(cell, "`") && strings.Count(cell, "`") == 2
}

// codeBlocks returns the contents of the fenced code blocks of a Markdown file.
func codeBlocks(md string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if in {
				blocks = append(blocks, strings.Join(cur, "\n"))
				cur = nil
			}
			in = !in
			continue
		}
		if in {
			cur = append(cur, line)
		}
	}
	return blocks
}

func codeBlockContaining(t *testing.T, rel, text string) string {
	t.Helper()
	for _, b := range codeBlocks(readFile(t, rel)) {
		if strings.Contains(b, text) {
			return b
		}
	}
	t.Fatalf("%s has no code block containing %q", rel, text)
	return ""
}

// stripFences removes fenced code blocks.
func stripFences(md string) string {
	var out []string
	in := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// stripCode removes fenced code blocks and inline code spans, where a link is not a link.
func stripCode(md string) string {
	return regexp.MustCompile("`[^`\n]*`").ReplaceAllString(stripFences(md), "")
}
