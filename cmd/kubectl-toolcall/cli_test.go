package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// syncBuffer is a bytes.Buffer the plugin's goroutines and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// invocation is one run of the plugin.
type invocation struct {
	stdout, stderr syncBuffer
	code           chan int
}

// start runs the plugin as the agent user in the background.
func start(ctx context.Context, args ...string) *invocation {
	inv := &invocation{code: make(chan int, 1)}
	go func() { inv.code <- run(ctx, args, &inv.stdout, &inv.stderr, agent.Config) }()
	return inv
}

func (inv *invocation) exit(g *WithT) int {
	var code int
	g.Eventually(inv.code).WithTimeout(30*time.Second).Should(Receive(&code), "stderr: %s", inv.stderr.String())
	return code
}

// plugin runs the plugin to completion.
func plugin(g *WithT, args ...string) (code int, stdout, stderr string) {
	inv := start(context.Background(), args...)
	code = inv.exit(g)
	return code, inv.stdout.String(), inv.stderr.String()
}

func newHarness(t *testing.T, opts ...th.Option) *th.Harness {
	h := th.New(t, env, opts...)
	agent.Bind(h)
	return h
}

func TestRunSucceededPrintsTheResultOnStdout(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	inv := start(t.Context(), "run", "issue_refund", "--args", th.RefundArgs, "--waiting-limit", "2m",
		"--name", "refund", "-l", "agent=cli", "-n", h.NS)
	req := h.PendingRequest("refund")
	g.Expect(req.Arguments).To(MatchJSON(th.RefundArgs))
	h.ApproveAndFinish("refund", true, `{"refund_id":"re_1"}`)

	g.Expect(inv.exit(g)).To(Equal(exitSucceeded))
	g.Expect(inv.stdout.String()).To(Equal(`{"refund_id":"re_1"}` + "\n"))
	stderr := inv.stderr.String()
	g.Expect(stderr).NotTo(ContainSubstring("\r"), "not a terminal: one line per phase change")
	g.Expect(stderr).To(ContainSubstring("toolcall refund: AwaitingApproval, "))
	g.Expect(stderr).To(MatchRegexp(`AwaitingApproval, (2m|1m[0-9]+s) left of the 2m waiting limit, provider deadline in [0-9ms]+ \(\d\d:\d\d:\d\d\)`))
	g.Expect(stderr).To(ContainSubstring("toolcall refund: Running, "))
	g.Expect(stderr).To(ContainSubstring("toolcall refund: Succeeded (job refund-"))
	g.Expect(strings.Count(stderr, "AwaitingApproval")).To(Equal(1))
	g.Expect(h.Get("refund").Labels).To(HaveKeyWithValue("agent", "cli"))
}

func TestRunDeniedExitsWithItsCodeAndTheNote(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	inv := start(t.Context(), "-n", h.NS, "run", "issue_refund", "--args", th.RefundArgs, "--waiting-limit", "2m", "--name", "refund", "--timeout", "1m")
	req := h.PendingRequest("refund")
	g.Expect(req.Timeout).To(Equal("1m"))
	_, err := h.Provider.Decide(req.ID, provider.StatusDenied, "Not a duplicate.", nil)
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(inv.exit(g)).To(Equal(exitDenied))
	g.Expect(inv.stdout.String()).To(BeEmpty())
	stderr := inv.stderr.String()
	g.Expect(stderr).To(ContainSubstring("toolcall refund: Denied\n"))
	g.Expect(stderr).To(ContainSubstring("  reason:        Denied\n"))
	g.Expect(stderr).To(ContainSubstring("  approver note: Not a duplicate.\n"))
	g.Expect(stderr).To(MatchRegexp(`  message: +\S`))
}

func TestRunFailedAndRejectedHaveTheirCodes(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	inv := start(t.Context(), "run", "issue_refund", "--args", "{}", "--waiting-limit", "2m", "--name", "refund", "-n", h.NS)
	h.ApproveAndFinish("refund", false, "card network declined the refund")
	g.Expect(inv.exit(g)).To(Equal(exitFailed))
	g.Expect(inv.stderr.String()).To(And(ContainSubstring("  reason:        JobFailed\n"), ContainSubstring("  result:        card network declined the refund\n")))

	code, stdout, stderr := plugin(g, "run", "no_such_tool", "--args", "{}", "--waiting-limit", "2m", "-n", h.NS)
	g.Expect(code).To(Equal(exitRejected))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(And(ContainSubstring(": Rejected\n"), ContainSubstring("reason:        UnknownTool"), ContainSubstring("no Tool in namespace")))
}

// A tool the agent may not call: the apiserver refuses the ToolCall, and run says why and exits 1.
func TestRunRefusedByAdmissionExitsOne(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("restart-pod", "restart_pod", "")
	code, stdout, stderr := plugin(g, "run", "restart_pod", "--args", `{"pod":"web-0"}`, "--waiting-limit", "2m", "--name", "restart", "-n", h.NS)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stdout).To(BeEmpty())
	g.Expect(stderr).To(ContainSubstring("user " + agent.User + " may not call tool restart_pod in namespace " + h.NS))
	g.Expect(stderr).To(ContainSubstring(`resourceNames: ["restart_pod"]`))
	err := h.K8s.Get(t.Context(), client.ObjectKey{Namespace: h.NS, Name: "restart"}, &tg.ToolCall{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing was created: want NotFound, got %v", err)
}

// Ctrl-C: the ToolCall is deleted, so Toolgate cancels the approval request.
func TestRunInterruptedDeletesTheToolCall(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	ctx, interrupt := context.WithCancel(t.Context())
	inv := start(ctx, "run", "issue_refund", "--args", th.RefundArgs, "--waiting-limit", "2m", "--name", "refund", "-n", h.NS)
	req := h.PendingRequest("refund")
	// Interrupted once the plugin has shown the call waiting for a human.
	g.Eventually(inv.stderr.String).Should(ContainSubstring("toolcall refund: AwaitingApproval"))
	interrupt()

	g.Expect(inv.exit(g)).To(Equal(exitInterrupted))
	g.Expect(inv.stderr.String()).To(ContainSubstring("interrupted: deleted toolcall refund (it was AwaitingApproval); Toolgate cancels its approval request."))
	h.WaitGone("refund", 20*time.Second)
	got, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(provider.StatusCancelled))
}

func TestWaitAttachesWithTheSameExitCodes(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")

	h.ToolCall("unknown", "no_such_tool", `{}`, 2*time.Minute, nil)
	g.Expect(h.WaitPhase("unknown", tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonUnknownTool))
	code, _, stderr := plugin(g, "wait", "unknown", "-n", h.NS)
	g.Expect(code).To(Equal(exitRejected))
	g.Expect(stderr).To(ContainSubstring("reason:        UnknownTool"))

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	req := h.PendingRequest("refund")
	inv := start(t.Context(), "wait", "refund", "-n", h.NS)
	g.Eventually(inv.stderr.String).Should(ContainSubstring("toolcall refund: AwaitingApproval"))
	_, err := h.Provider.Cancel(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(inv.exit(g)).To(Equal(exitCancelled))
	g.Expect(inv.stderr.String()).To(ContainSubstring("reason:        ProviderCancelled"))

	// Interrupting wait leaves the ToolCall unless asked to delete it.
	h.ToolCall("kept", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.PendingRequest("kept")
	ctx, interrupt := context.WithCancel(t.Context())
	inv = start(ctx, "wait", "kept", "-n", h.NS)
	g.Eventually(inv.stderr.String).Should(ContainSubstring("toolcall kept: AwaitingApproval"))
	interrupt()
	g.Expect(inv.exit(g)).To(Equal(exitInterrupted))
	g.Expect(inv.stderr.String()).To(ContainSubstring("toolcall kept is left as it is (AwaitingApproval)"))
	g.Expect(h.Get("kept").DeletionTimestamp).To(BeNil())

	ctx, interrupt = context.WithCancel(t.Context())
	inv = start(ctx, "wait", "kept", "--delete-on-interrupt", "-n", h.NS)
	g.Eventually(inv.stderr.String).Should(ContainSubstring("toolcall kept: AwaitingApproval"))
	interrupt()
	g.Expect(inv.exit(g)).To(Equal(exitInterrupted))
	g.Expect(inv.stderr.String()).To(ContainSubstring("interrupted: deleted toolcall kept"))
	h.WaitGone("kept", 20*time.Second)

	code, _, stderr = plugin(g, "wait", "nobody", "-n", h.NS)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stderr).To(ContainSubstring(`no ToolCall "nobody" in namespace`))
}

func TestGetAndDescribeShowTheFields(t *testing.T) {
	h := newHarness(t)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund-denied", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	_, err := h.Provider.Decide(h.PendingRequest("refund-denied").ID, provider.StatusDenied, "Not a duplicate.", nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(h.WaitPhase("refund-denied", tg.PhaseDenied).Status.Reason).To(Equal(tg.ReasonDenied))
	h.ToolCall("refund-done", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	running := h.ApproveAndFinish("refund-done", true, "refund re_1 issued")
	g.Expect(h.WaitPhase("refund-done", tg.PhaseSucceeded).Status.Reason).To(Equal(tg.ReasonJobSucceeded))
	h.ToolCall("unknown", "no_such_tool", `{}`, 2*time.Minute, nil)
	g.Expect(h.WaitPhase("unknown", tg.PhaseRejected).Status.Reason).To(Equal(tg.ReasonUnknownTool))

	// Through a kubeconfig file, with the connection flags before the subcommand.
	code, stdout, _ := plugin(g, "--kubeconfig", agent.Kubeconfig, "-n", h.NS, "get")
	g.Expect(code).To(Equal(exitSucceeded))
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	g.Expect(lines).To(HaveLen(4))
	g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "TOOL", "PHASE", "READY", "DECISION", "JOB", "AGE"}))
	g.Expect(strings.Fields(lines[1])[:6]).To(Equal([]string{"refund-denied", "issue_refund", "Denied", "True", "denied", "<none>"}))
	g.Expect(strings.Fields(lines[2])[:6]).To(Equal([]string{"refund-done", "issue_refund", "Succeeded", "True", "approved", running.Status.JobName}))
	g.Expect(strings.Fields(lines[3])[:6]).To(Equal([]string{"unknown", "no_such_tool", "Rejected", "True", "<none>", "<none>"}))

	code, stdout, _ = plugin(g, "get", "refund-denied", "-o", "json", "-n", h.NS)
	g.Expect(code).To(Equal(exitSucceeded))
	var obj tg.ToolCall
	g.Expect(json.Unmarshal([]byte(stdout), &obj)).To(Succeed())
	g.Expect(obj.Kind).To(Equal("ToolCall"))
	g.Expect(obj.APIVersion).To(Equal("toolgate.dev/v1alpha1"))
	g.Expect(obj.Spec.Tool).To(Equal("issue_refund"))
	g.Expect(obj.Status.Decision.Note).To(Equal("Not a duplicate."))
	g.Expect(obj.ManagedFields).To(BeEmpty())

	code, stdout, _ = plugin(g, "get", "-o", "yaml", "-n", h.NS)
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(And(ContainSubstring("kind: List"), ContainSubstring("tool: issue_refund"), ContainSubstring("phase: Succeeded"), ContainSubstring("result: refund re_1 issued")))

	code, stdout, _ = plugin(g, "get", "-o", "name", "-n", h.NS)
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(Equal("toolcall.toolgate.dev/refund-denied\ntoolcall.toolgate.dev/refund-done\ntoolcall.toolgate.dev/unknown\n"))

	code, stdout, _ = plugin(g, "describe", "refund-denied", "-n", h.NS)
	g.Expect(code).To(Equal(exitSucceeded))
	for _, want := range []string{
		"Name:", "refund-denied", "Tool:", "issue_refund", "Requested by:", "system:masters", "Waiting limit:", "2m, ends",
		"Approval timeout:", "(chosen by Toolgate)", "Phase:", "Denied", "Reason:", "Message:",
		"Request ID:", "Provider deadline:", "Decision:", "denied", "Note:", "Not a duplicate.",
		"Arguments:", `"payment_id": "payment_123"`, "Conditions:", "Approved", "Ready", "Executed",
	} {
		g.Expect(stdout).To(ContainSubstring(want))
	}
	code, stdout, _ = plugin(g, "describe", "refund-done", "-n", h.NS)
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(And(MatchRegexp(`Job: +`+running.Status.JobName), ContainSubstring("Result:\n  refund re_1 issued\n"), MatchRegexp(`Expires at: +\d{4}-`)))

	code, _, stderr := plugin(g, "describe", "nobody", "-n", h.NS)
	g.Expect(code).To(Equal(exitError))
	g.Expect(stderr).To(ContainSubstring(`toolcall "nobody" not found in namespace`))

	code, _, stderr = plugin(g, "get", "-n", "elsewhere")
	g.Expect(code).To(Equal(exitError), "the agent role is bound in its namespace only")
	g.Expect(stderr).To(ContainSubstring("forbidden"))
}

func TestUsageErrorsNameTheFlag(t *testing.T) {
	h := newHarness(t, th.WithoutManager())
	g := h.G
	cases := []struct {
		args []string
		want string
	}{
		{nil, "a subcommand is required"},
		{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`},
		{[]string{"--bogus", "get"}, "unknown flag: --bogus"},
		{[]string{"run", "issue_refund", "--args", "{}"}, "--waiting-limit is required"},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "soon"}, `invalid argument "soon" for "--waiting-limit" flag`},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "-1m"}, "--waiting-limit must be a positive duration"},
		{[]string{"run", "issue_refund", "--args", "[1]", "--waiting-limit", "2m"}, "--args: arguments must be a JSON object, got an array"},
		{[]string{"run", "issue_refund", "--args", "{oops", "--waiting-limit", "2m"}, "--args: arguments are not valid JSON"},
		{[]string{"run", "issue_refund", "--waiting-limit", "2m"}, "--args is required"},
		{[]string{"run", "issue_refund", "--args", "{}", "--args-file", "/dev/null", "--waiting-limit", "2m"}, "--args and --args-file are mutually exclusive"},
		{[]string{"run", "issue_refund", "--args-file", "/nonexistent/args.json", "--waiting-limit", "2m"}, "--args-file: open /nonexistent/args.json"},
		{[]string{"run", "--args", "{}", "--waiting-limit", "2m"}, "TOOL is required"},
		{[]string{"run", "issue_refund", "amount=1", "--args", "{}", "--waiting-limit", "2m"}, "run takes one TOOL, got 2 arguments"},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "2m", "--timeout", "0s"}, "--timeout must be a positive duration"},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "2m", "--reason", strings.Repeat("x", 4097)}, "--reason is 4097 bytes: shorten it to at most 4096 bytes (4 KiB)"},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "2m", "-l", "novalue"}, `--label "novalue": use KEY=VALUE`},
		{[]string{"run", "issue_refund", "--args", "{}", "--waiting-limit", "2m", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"wait"}, "wait takes exactly one NAME"},
		{[]string{"get", "-o", "xml"}, `--output (-o) "xml" is not supported`},
		{[]string{"get", "a", "b"}, "get takes at most one NAME"},
		{[]string{"get", "a", "-A"}, "a NAME cannot be combined with --all-namespaces"},
		{[]string{"get", "-l", "a=(b"}, `--selector (-l) "a=(b"`},
		{[]string{"describe"}, "describe takes exactly one NAME"},
		{[]string{"receipt"}, "receipt takes exactly one NAME"},
		{[]string{"verify", "--key", "key.pub"}, "verify takes exactly one NAME"},
		{[]string{"verify", "refund"}, "--key is required"},
		{[]string{"verify", "refund", "--key", "key.pub", "--receipts", "log.json"}, "--receipts adds receipts to the chain that --chain checks: pass --chain too"},
	}
	for _, c := range cases {
		code, stdout, stderr := plugin(g, append(c.args, "-n", h.NS)...)
		g.Expect(code).To(Equal(exitUsage), "%v: %s", c.args, stderr)
		g.Expect(stderr).To(HavePrefix("error: "+c.want), "%v", c.args)
		g.Expect(stderr).To(ContainSubstring("--help' for usage."), "%v", c.args)
		g.Expect(stdout).To(BeEmpty(), "%v", c.args)
	}
	list := &tg.ToolCallList{}
	g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty(), "a usage error creates nothing")
}

func TestHelpListsTheExitCodes(t *testing.T) {
	g := NewWithT(t)
	for _, args := range [][]string{{"--help"}, {"help"}, {"run", "--help"}, {"wait", "-h"}} {
		code, stdout, stderr := plugin(g, args...)
		g.Expect(code).To(Equal(exitSucceeded), "%v", args)
		g.Expect(stderr).To(BeEmpty())
		g.Expect(stdout).To(And(ContainSubstring("Exit codes"), ContainSubstring("4    Denied"), ContainSubstring("130  interrupted")), "%v", args)
	}
	code, stdout, _ := plugin(g, "run", "--help")
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(And(ContainSubstring("--waiting-limit duration"), ContainSubstring("--args string"), ContainSubstring("--timeout duration")))
	code, stdout, _ = plugin(g, "get", "--help")
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(ContainSubstring("-o, --output string"))
	code, stdout, _ = plugin(g, "verify", "--help")
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(And(ContainSubstring("--key stringArray"), ContainSubstring("--chain"), ContainSubstring("1  a check failed")))
	code, stdout, _ = plugin(g, "--help")
	g.Expect(code).To(Equal(exitSucceeded))
	g.Expect(stdout).To(And(ContainSubstring("kubectl toolcall receipt NAME"), ContainSubstring("kubectl toolcall verify NAME --key FILE")))
}
