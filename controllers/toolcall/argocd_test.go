package toolcall

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/test/testenv"
)

// argoHealthChecks reads the argocd-cm snippet of docs/gitops.md: its health checks by key.
func argoHealthChecks(g Gomega) map[string]string {
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	doc, err := os.ReadFile(filepath.Join(root, "docs", "gitops.md"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		if !strings.Contains(m[1], "name: argocd-cm") {
			continue
		}
		var cm struct {
			Data map[string]string `json:"data"`
		}
		g.Expect(yaml.Unmarshal([]byte(m[1]), &cm)).To(Succeed())
		return cm.Data
	}
	g.Expect("docs/gitops.md").To(BeEmpty(), "has no argocd-cm snippet")
	return nil
}

// argoHealth runs a health check as Argo CD does (gopher-lua, the object as the global obj) and
// returns the status and message it set.
func argoHealth(g Gomega, script string, obj runtime.Object) (string, string) {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	g.Expect(err).NotTo(HaveOccurred())
	L := lua.NewState(lua.Options{SkipOpenLibs: false})
	defer L.Close()
	L.SetGlobal("obj", toLua(L, raw))
	g.Expect(L.DoString(script)).To(Succeed())
	hs, ok := L.Get(-1).(*lua.LTable)
	g.Expect(ok).To(BeTrue(), "the health check returned no table")
	return hs.RawGetString("status").String(), hs.RawGetString("message").String()
}

// toLua converts decoded JSON into Lua values, as Argo CD hands an object to a health check.
func toLua(L *lua.LState, v any) lua.LValue {
	switch x := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range x {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range x {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(x)
	case bool:
		return lua.LBool(x)
	case int64:
		return lua.LNumber(x)
	case float64:
		return lua.LNumber(x)
	}
	return lua.LNil
}

// The ToolCall health check of docs/gitops.md, run by Argo CD's Lua interpreter over a ToolCall in
// every row of the outcome table: Progressing while the call is under way, Healthy once it
// succeeded, Degraded for every other outcome, with the phase, reason and message to say why.
func TestArgoCDHealthFollowsEveryOutcome(t *testing.T) {
	checks := argoHealthChecks(NewWithT(t))
	script := checks["resource.customizations.health.toolgate.dev_ToolCall"]
	NewWithT(t).Expect(script).NotTo(BeEmpty())
	for _, row := range lifecycle.Rows() {
		t.Run(string(row.Phase)+"/"+row.Reason, func(t *testing.T) {
			g := NewWithT(t)
			tc := &tg.ToolCall{}
			tc.Name, tc.Generation = "refund", 1
			setPhase(tc, row.Phase, row.Reason, "The message.")
			status, message := argoHealth(g, script, tc)
			switch {
			case !row.Phase.IsTerminal():
				g.Expect(status).To(Equal("Progressing"))
			case row.Phase == tg.PhaseSucceeded:
				g.Expect(status).To(Equal("Healthy"))
			default:
				g.Expect(status).To(Equal("Degraded"))
			}
			g.Expect(message).To(Equal(string(row.Phase) + " (" + row.Reason + "): The message."))
		})
	}
	g := NewWithT(t)
	status, _ := argoHealth(g, script, &tg.ToolCall{})
	g.Expect(status).To(Equal("Progressing"), "a ToolCall the controller has not written yet")
}

// The Tool and provider health checks: Healthy when their condition is True for their generation,
// Degraded when False, Progressing before the controller looked at this generation.
func TestArgoCDHealthOfToolsAndProviders(t *testing.T) {
	g := NewWithT(t)
	checks := argoHealthChecks(g)
	cond := func(typ string, status metav1.ConditionStatus, gen int64) []metav1.Condition {
		var out []metav1.Condition
		meta.SetStatusCondition(&out, metav1.Condition{Type: typ, Status: status, Reason: "Why", Message: "What.", ObservedGeneration: gen})
		return out
	}
	for _, c := range []struct {
		status metav1.ConditionStatus
		gen    int64
		want   string
	}{
		{metav1.ConditionTrue, 2, "Healthy"},
		{metav1.ConditionFalse, 2, "Degraded"},
		{metav1.ConditionTrue, 1, "Progressing"},
	} {
		tool := &tg.Tool{}
		tool.Generation = 2
		tool.Status.Conditions = cond(tg.ConditionApprovalRulesReady, c.status, c.gen)
		status, _ := argoHealth(g, checks["resource.customizations.health.toolgate.dev_Tool"], tool)
		g.Expect(status).To(Equal(c.want), "Tool %s at generation %d", c.status, c.gen)

		ap := &tg.ApprovalProvider{}
		ap.Generation = 2
		ap.Status.Conditions = cond(tg.ConditionReady, c.status, c.gen)
		cp := &tg.ClusterApprovalProvider{}
		cp.Generation = 2
		cp.Status.Conditions = ap.Status.Conditions
		for key, obj := range map[string]runtime.Object{"ApprovalProvider": ap, "ClusterApprovalProvider": cp} {
			status, message := argoHealth(g, checks["resource.customizations.health.toolgate.dev_"+key], obj)
			g.Expect(status).To(Equal(c.want), "%s %s at generation %d", key, c.status, c.gen)
			if c.want != "Progressing" {
				g.Expect(message).To(Equal("Why: What."))
			}
		}
	}
}
