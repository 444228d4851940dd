package policy

import (
	"errors"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func rules(rs ...tg.ApprovalRule) *tg.ApprovalPolicy { return &tg.ApprovalPolicy{Rules: rs} }

func rule(name, expr string, action tg.ApprovalAction) tg.ApprovalRule {
	return tg.ApprovalRule{Name: name, Expression: expr, Action: action}
}

// refunds is the worked example of docs/policies.md.
var refunds = rules(
	rule("no-other-currencies", `arguments.currency != "GBP"`, tg.ActionRequire),
	rule("small-refunds", `arguments.amount < 5000`, tg.ActionApprove),
)

var deletes = rules(
	rule("never-prod", `arguments.name.startsWith("prod-")`, tg.ActionDeny),
	rule("ops-may-delete-staging", `arguments.name.startsWith("staging-") && "ops" in requester.groups`, tg.ActionApprove),
)

func TestEvaluate(t *testing.T) {
	c, err := NewCompiler(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	ops := Requester{Username: "alice", UID: "u-1", Groups: []string{"ops", "system:authenticated"}}
	for _, tc := range []struct {
		name      string
		policy    *tg.ApprovalPolicy
		args      string
		requester Requester
		preview   *Preview
		action    tg.ApprovalAction
		rule      string
		err       string // substring of Result.Err; "" for none
	}{
		{name: "no policy asks a human", policy: nil, args: `{"amount": 1}`, action: tg.ActionRequire},
		{name: "no rules ask a human", policy: rules(), args: `{"amount": 1}`, action: tg.ActionRequire},
		{name: "small refund approved by policy", policy: refunds, args: `{"payment_id": "p", "amount": 4900, "currency": "GBP"}`, action: tg.ActionApprove, rule: "small-refunds"},
		{name: "large refund asks a human (no rule matches)", policy: refunds, args: `{"amount": 5000, "currency": "GBP"}`, action: tg.ActionRequire},
		{name: "first match wins: a small refund in EUR asks a human", policy: refunds, args: `{"amount": 100, "currency": "EUR"}`, action: tg.ActionRequire, rule: "no-other-currencies"},
		{name: "first match wins over a later Approve", policy: rules(
			rule("deny-all", `true`, tg.ActionDeny), rule("approve-all", `true`, tg.ActionApprove)),
			args: `{}`, action: tg.ActionDeny, rule: "deny-all"},
		{name: "a false rule is skipped", policy: rules(
			rule("never", `false`, tg.ActionDeny), rule("always", `true`, tg.ActionApprove)),
			args: `{}`, action: tg.ActionApprove, rule: "always"},
		{name: "a fractional amount compares with an int", policy: refunds, args: `{"amount": 4999.5, "currency": "GBP"}`, action: tg.ActionApprove, rule: "small-refunds"},
		{name: "prod delete denied", policy: deletes, args: `{"name": "prod-db"}`, requester: ops, action: tg.ActionDeny, rule: "never-prod"},
		{name: "staging delete by ops approved", policy: deletes, args: `{"name": "staging-db"}`, requester: ops, action: tg.ActionApprove, rule: "ops-may-delete-staging"},
		{name: "staging delete by someone else asks a human", policy: deletes, args: `{"name": "staging-db"}`, requester: Requester{Username: "bob"}, action: tg.ActionRequire},
		{name: "no recorded requester is empty, not an error", policy: deletes, args: `{"name": "staging-db"}`, action: tg.ActionRequire},
		{name: "requester username", policy: rules(rule("alice", `requester.username == "alice" && requester.uid == "u-1"`, tg.ActionApprove)),
			args: `{}`, requester: ops, action: tg.ActionApprove, rule: "alice"},

		// Missing fields and wrong types stop the evaluation: a human decides, nothing is skipped.
		{name: "missing field fails the rule, a later Approve is not reached", policy: rules(
			rule("never-prod", `arguments.name.startsWith("prod-")`, tg.ActionDeny), rule("approve-all", `true`, tg.ActionApprove)),
			args: `{"id": 7}`, action: tg.ActionRequire, err: "rule never-prod: no such key: name"},
		{name: "missing field guarded with has()", policy: rules(
			rule("never-prod", `has(arguments.name) && arguments.name.startsWith("prod-")`, tg.ActionDeny), rule("approve-all", `true`, tg.ActionApprove)),
			args: `{"id": 7}`, action: tg.ActionApprove, rule: "approve-all"},
		{name: "wrong type: amount is a string", policy: refunds, args: `{"amount": "4900", "currency": "GBP"}`, action: tg.ActionRequire, err: "rule small-refunds: no such overload"},
		{name: "wrong type: name is a number", policy: deletes, args: `{"name": 42}`, action: tg.ActionRequire, err: "rule never-prod: no such overload"},
		{name: "a dyn expression that is not a bool", policy: rules(rule("flag", `arguments.flag`, tg.ActionApprove)),
			args: `{"flag": "yes"}`, action: tg.ActionRequire, err: "rule flag: expression evaluated to string, not a bool"},
		{name: "a dyn expression that is a bool", policy: rules(rule("flag", `arguments.flag`, tg.ActionApprove)),
			args: `{"flag": true}`, action: tg.ActionApprove, rule: "flag"},
		{name: "arguments that are not an object", policy: refunds, args: `[1]`, action: tg.ActionRequire, err: "spec.arguments is not a JSON object"},

		// The preview, as the rules of a Tool with one see it (docs/previews.md).
		{name: "harmless plan approved", policy: plans, preview: &Preview{Format: "json", Output: `{"adds":3,"changes":0,"deletes":0}`, Digest: "sha256:a"},
			args: `{}`, action: tg.ActionApprove, rule: "only-additions"},
		{name: "dangerous plan denied", policy: plans, preview: &Preview{Format: "json", Output: `{"adds":0,"changes":1,"deletes":2}`},
			args: `{}`, action: tg.ActionDeny, rule: "no-deletions"},
		{name: "other plan asks a human", policy: plans, preview: &Preview{Format: "json", Output: `{"adds":0,"changes":1,"deletes":0}`},
			args: `{}`, action: tg.ActionRequire},
		{name: "failed preview asks a human", policy: plans, preview: &Preview{Failed: true, Error: "timed out"},
			args: `{}`, action: tg.ActionRequire, rule: "preview-failed"},
		{name: "text preview: json is null, format guards it", policy: plans, preview: &Preview{Format: "text", Output: "3 to add"},
			args: `{}`, action: tg.ActionRequire},
		{name: "text preview read as json fails the rule", policy: rules(rule("r", `preview.json.deletes > 0`, tg.ActionDeny)),
			preview: &Preview{Format: "text", Output: "3 to add"}, args: `{}`, action: tg.ActionRequire, err: "rule r:"},
		{name: "output and digest as strings", policy: rules(rule("r", `preview.output.contains("add") && preview.digest == "sha256:b"`, tg.ActionApprove)),
			preview: &Preview{Format: "text", Output: "3 to add", Digest: "sha256:b"}, args: `{}`, action: tg.ActionApprove, rule: "r"},
		{name: "a Tool without a preview: present is false", policy: rules(rule("r", `!preview.present`, tg.ActionApprove)),
			args: `{}`, action: tg.ActionApprove, rule: "r"},
		{name: "a Tool without a preview never matches a preview rule", policy: plans, args: `{}`, action: tg.ActionRequire},
		{name: "a json record that does not decode asks a human", policy: plans, preview: &Preview{Format: "json", Output: `{"adds":`},
			args: `{}`, action: tg.ActionRequire, err: "does not decode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rs, err := c.Compile(tc.policy)
			g.Expect(err).NotTo(HaveOccurred())
			got := rs.Evaluate(Input{Arguments: []byte(tc.args), Requester: tc.requester, Preview: tc.preview})
			if tc.err != "" {
				g.Expect(got.Err).To(MatchError(ContainSubstring(tc.err)))
				g.Expect(got.Action).To(Equal(tg.ActionRequire))
				g.Expect(got.Rule).To(BeEmpty())
				return
			}
			g.Expect(got.Err).NotTo(HaveOccurred())
			g.Expect(got.Action).To(Equal(tc.action))
			g.Expect(got.Rule).To(Equal(tc.rule))
		})
	}
}

func TestCompileErrors(t *testing.T) {
	c, err := NewCompiler(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		policy *tg.ApprovalPolicy
		want   []string // one problem per failing rule, in order
	}{
		{name: "syntax error", policy: rules(rule("bad", `arguments.amount <`, tg.ActionApprove)),
			want: []string{"spec.approval.rules[0] (bad): expression does not compile: at 1:19: Syntax error"}},
		{name: "undeclared variable", policy: rules(rule("ok", `true`, tg.ActionDeny), rule("clock", `now.getHours() < 18`, tg.ActionApprove)),
			want: []string{"spec.approval.rules[1] (clock): expression does not compile: at 1:1: undeclared reference to 'now'"}},
		{name: "not a bool", policy: rules(rule("amount", `arguments.amount + 1`, tg.ActionApprove)),
			want: []string{"spec.approval.rules[0] (amount): expression evaluates to int; it must evaluate to a bool"}},
		{name: "unknown action", policy: rules(rule("a", `true`, "Allow")),
			want: []string{`spec.approval.rules[0] (a): action "Allow" is not one of Deny, Approve, Require`}},
		{name: "duplicate name", policy: rules(rule("a", `true`, tg.ActionDeny), rule("a", `false`, tg.ActionDeny)),
			want: []string{"spec.approval.rules[1] (a): name is used by an earlier rule"}},
		{name: "every failing rule is reported", policy: rules(rule("x", `)`, tg.ActionDeny), rule("ok", `true`, tg.ActionDeny), rule("y", `1`, tg.ActionDeny)),
			want: []string{"spec.approval.rules[0] (x): expression does not compile", "spec.approval.rules[2] (y): expression evaluates to int"}},
		{name: "estimated cost over the limit", policy: rules(rule("quadratic",
			`arguments.items.all(a, arguments.items.all(b, a == b || a != b))`, tg.ActionApprove)),
			want: []string{"spec.approval.rules[0] (quadratic): expression's estimated worst-case cost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			rs, err := c.Compile(tc.policy)
			g.Expect(rs).To(BeNil())
			var ce *CompileError
			g.Expect(errors.As(err, &ce)).To(BeTrue(), "a *CompileError, got %v", err)
			g.Expect(ce.Problems).To(HaveLen(len(tc.want)))
			for i, w := range tc.want {
				g.Expect(ce.Problems[i]).To(ContainSubstring(w))
			}
		})
	}
}

func TestCostLimits(t *testing.T) {
	g := NewWithT(t)
	// A linear rule over a large list compiles within the default limits...
	linear := rules(rule("all-small", `arguments.items.all(i, i < 100)`, tg.ActionApprove))
	c, err := NewCompiler(DefaultLimits())
	g.Expect(err).NotTo(HaveOccurred())
	rs, err := c.Compile(linear)
	g.Expect(err).NotTo(HaveOccurred())
	items := "[" + strings.Repeat("1,", 10000) + "1]"
	g.Expect(rs.Evaluate(Input{Arguments: []byte(`{"items": ` + items + `}`)})).To(Equal(Result{Action: tg.ActionApprove, Rule: "all-small"}))

	// ...and is stopped at evaluation when it costs more than one rule may.
	small := DefaultLimits()
	small.PerRuleCost = 1000
	c, err = NewCompiler(small)
	g.Expect(err).NotTo(HaveOccurred())
	rs, err = c.Compile(rules(rule("all-small", `arguments.items.all(i, i < 100)`, tg.ActionApprove), rule("then", `true`, tg.ActionApprove)))
	g.Expect(err).NotTo(HaveOccurred())
	got := rs.Evaluate(Input{Arguments: []byte(`{"items": ` + items + `}`)})
	g.Expect(got.Action).To(Equal(tg.ActionRequire))
	g.Expect(got.Rule).To(BeEmpty())
	g.Expect(got.Err).To(MatchError(ContainSubstring("rule all-small: operation cancelled: actual cost limit exceeded")))
	// The same rule over a short list stays within the limit.
	g.Expect(rs.Evaluate(Input{Arguments: []byte(`{"items": [1, 2, 3]}`)})).To(Equal(Result{Action: tg.ActionApprove, Rule: "all-small"}))

	// The rules of one call share a budget.
	shared := DefaultLimits()
	shared.PerCallCost = 80000 // one rule over these items costs about 50000
	c, err = NewCompiler(shared)
	g.Expect(err).NotTo(HaveOccurred())
	rs, err = c.Compile(rules(
		rule("first", `arguments.items.all(i, i < 100) && false`, tg.ActionDeny),
		rule("second", `arguments.items.all(i, i < 100) && false`, tg.ActionDeny),
		rule("third", `true`, tg.ActionApprove)))
	g.Expect(err).NotTo(HaveOccurred())
	got = rs.Evaluate(Input{Arguments: []byte(`{"items": ` + items + `}`)})
	g.Expect(got.Action).To(Equal(tg.ActionRequire))
	g.Expect(got.Err).To(MatchError(ContainSubstring("rule second: the rules together exceeded the cost limit 80000")))
}

// docs/policies.md lists these functions as part of the environment.
func TestDocumentedFunctionsEvaluate(t *testing.T) {
	c, err := NewCompiler(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	args := `{"name": "scratch-42", "items": [3, 1, 2], "tags": ["a", "b"], "url": "https://example.com/x", "mem": "1Gi", "addr": "10.0.0.1", "version": "1.2.3", "at": "2026-09-16T12:00:00Z"}`
	for _, expr := range []string{
		`arguments.name.startsWith("scratch-") && arguments.name.endsWith("42") && arguments.name.contains("ch")`,
		`arguments.name.matches("^scratch-[0-9]+$") && arguments.name.lowerAscii() == arguments.name`,
		`arguments.name.split("-").size() == 2 && arguments.name.replace("scratch", "s") == "s-42"`,
		`"%s!".format([arguments.name]) == "scratch-42!"`,
		`!arguments.items.isSorted() && arguments.items.sum() == 6 && arguments.items.min() == 1 && arguments.items.max() == 3`,
		`arguments.items.indexOf(1) == 1 && arguments.items.slice(0, 1) == [3]`,
		`sets.contains(arguments.tags, ["a"]) && sets.intersects(arguments.tags, ["b", "c"])`,
		`arguments.?currency.orValue("GBP") == "GBP"`,
		`arguments.items.all(i, v, v > 0 && i >= 0)`,
		`url(arguments.url).getHost() == "example.com"`,
		`quantity(arguments.mem).isGreaterThan(quantity("1Mi"))`,
		`ip(arguments.addr).family() == 4 && cidr("10.0.0.0/8").containsIP(ip(arguments.addr))`,
		`semver(arguments.version).isLessThan(semver("2.0.0"))`,
		`!format.dns1123Label().validate(arguments.name).hasValue()`,
		`timestamp(arguments.at) < timestamp("2027-01-01T00:00:00Z") && duration("1h") > duration("30m")`,
	} {
		t.Run(expr, func(t *testing.T) {
			g := NewWithT(t)
			rs, err := c.Compile(rules(rule("r", expr, tg.ActionApprove)))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(rs.Evaluate(Input{Arguments: []byte(args)})).To(Equal(Result{Action: tg.ActionApprove, Rule: "r"}))
		})
	}
}

// plans: a harmless plan is approved, a dangerous one denied, and a failed preview put to a human.
var plans = rules(
	rule("preview-failed", `preview.failed`, tg.ActionRequire),
	rule("no-deletions", `preview.format == "json" && preview.json.deletes > 0`, tg.ActionDeny),
	rule("only-additions", `preview.format == "json" && preview.json.changes == 0`, tg.ActionApprove),
)

// Before the preview runs, only the rules before the first one that reads it can decide: a Deny there
// rejects the call without running the preview.
func TestEvaluateBeforePreview(t *testing.T) {
	c, err := NewCompiler(DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := c.Compile(rules(
		rule("no-eur", `arguments.currency == "EUR"`, tg.ActionDeny),
		rule("small-plans", `preview.format == "json" && preview.json.amount < 5000`, tg.ActionApprove),
		rule("never-usd", `arguments.currency == "USD"`, tg.ActionDeny),
	))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   string
		action tg.ApprovalAction
		rule   string
	}{
		{`{"currency": "EUR"}`, tg.ActionDeny, "no-eur"},
		{`{"currency": "GBP"}`, tg.ActionRequire, ""},
		// never-usd comes after a rule that reads the preview: it decides only once the preview is known.
		{`{"currency": "USD"}`, tg.ActionRequire, ""},
	} {
		got := rs.EvaluateBeforePreview(Input{Arguments: []byte(tc.args)})
		if got.Err != nil || got.Action != tc.action || got.Rule != tc.rule {
			t.Errorf("EvaluateBeforePreview(%s) = %v %q %v; want %v %q", tc.args, got.Action, got.Rule, got.Err, tc.action, tc.rule)
		}
	}
	if got := rs.Evaluate(Input{Arguments: []byte(`{"currency": "USD"}`), Preview: &Preview{Format: "json", Output: `{"amount": 9000}`}}); got.Action != tg.ActionDeny || got.Rule != "never-usd" {
		t.Errorf("with the preview, never-usd decides: got %v %q", got.Action, got.Rule)
	}
}
