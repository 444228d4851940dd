package tools

import (
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/controllers/internal/toolcache"
	"toolgate.dev/toolgate/internal/policy"
	"toolgate.dev/toolgate/test/argohealth"
	"toolgate.dev/toolgate/test/testenv"
)

func newCache(t *testing.T) *toolcache.Cache {
	t.Helper()
	c, err := toolcache.New(policy.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// conditions are the conditions the controller writes on tool, as Reconcile sets them.
func conditions(tool *tg.Tool, c *toolcache.Cache) []metav1.Condition {
	var conds []metav1.Condition
	rules := rulesCondition(tool, c)
	meta.SetStatusCondition(&conds, rules)
	p, reason, message := readyOutcome(tool, rules, c)
	readiness.Set(&conds, tool.Generation, p, reason, message)
	return conds
}

// readyOutcome is what ready says, as the progress, reason and message of Ready.
func readyOutcome(tool *tg.Tool, rules metav1.Condition, c *toolcache.Cache) (readiness.Progress, string, string) {
	message, problem := ready(tool, rules, c)
	if problem == nil {
		return readiness.Usable, tg.ReasonSpecCompiled, message
	}
	e, ok := readiness.ErrorOf(problem)
	if !ok {
		panic("ready returned " + problem.Error())
	}
	return e.Progress, e.Reason, e.Message
}

// Ready is True when the approval rules and the argumentsSchema compile, and a configuration error
// (Stalled) with the reason of what does not; when neither compiles, the rules' reason, and the
// message says both.
func TestReadyNeedsTheRulesAndTheSchemaToCompile(t *testing.T) {
	badRules := &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "typo", Expression: "amout < 5000", Action: tg.ActionApprove}}}
	goodRules := &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "small", Expression: "arguments.amount < 5000", Action: tg.ActionApprove}}}
	for _, c := range []struct {
		name          string
		rules         *tg.ApprovalPolicy
		schema        string
		progress      readiness.Progress
		reason        string
		messageHolds  []string
		rulesCompiled bool
	}{
		{"nothing to compile", nil, "", readiness.Usable, tg.ReasonSpecCompiled,
			[]string{"No approval rules: a human decides every call.", "No spec.argumentsSchema."}, true},
		{"both compile", goodRules, `{"type":"object"}`, readiness.Usable, tg.ReasonSpecCompiled,
			[]string{"1 approval rules compiled", "spec.argumentsSchema compiled."}, true},
		{"rules do not compile", badRules, `{"type":"object"}`, readiness.Stalled, tg.ReasonInvalidApprovalRules,
			[]string{"spec.approval does not compile", "amout"}, false},
		{"schema does not compile", goodRules, `{"type":"record"}`, readiness.Stalled, tg.ReasonInvalidArgumentsSchema,
			[]string{"spec.argumentsSchema does not compile", "InvalidTool"}, true},
		{"neither compiles", badRules, `{"type":"record"}`, readiness.Stalled, tg.ReasonInvalidApprovalRules,
			[]string{"spec.approval does not compile", "spec.argumentsSchema does not compile"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			tool := &tg.Tool{}
			tool.UID, tool.Generation = types.UID(c.name), 4
			tool.Spec.Approval = c.rules
			if c.schema != "" {
				tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(c.schema)}
			}
			cache := newCache(t)
			rules := rulesCondition(tool, cache)
			g.Expect(rules.Status == metav1.ConditionTrue).To(Equal(c.rulesCompiled), "ApprovalRulesReady says what it said before")
			p, reason, message := readyOutcome(tool, rules, cache)
			g.Expect(p).To(Equal(c.progress))
			g.Expect(reason).To(Equal(c.reason))
			for _, s := range c.messageHolds {
				g.Expect(message).To(ContainSubstring(s))
			}
		})
	}
}

// The Argo CD health check's testdata for Tools (config/argocd) holds, for every Tool the controller
// checked at its generation, exactly the conditions the controller writes for that spec.
func TestArgoCDTestdataIsWhatTheControllerWrites(t *testing.T) {
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	files, err := filepath.Glob(filepath.Join(root, argohealth.Dir("Tool"), "testdata", "*.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		g.Expect(err).NotTo(HaveOccurred())
		tool := &tg.Tool{}
		g.Expect(yaml.UnmarshalStrict(b, tool)).To(Succeed(), f)
		if tool.Status.ObservedGeneration != tool.Generation {
			continue // not checked at this generation yet
		}
		tool.UID = types.UID(f)
		want := conditions(tool, newCache(t))
		g.Expect(tool.Status.Conditions).To(HaveLen(len(want)), f)
		for i := range want {
			got := tool.Status.Conditions[i]
			got.LastTransitionTime = want[i].LastTransitionTime
			g.Expect(got).To(Equal(want[i]), "%s: condition %s", f, want[i].Type)
		}
		checked++
	}
	g.Expect(checked).To(BeNumerically(">=", 3))
}
