package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/aapstrict"
	th "toolgate.dev/toolgate/test/testharness"
)

// strictCredential is the instance credential the strict provider accepts and the manager is given.
const strictCredential = "cli-instance-credential"

// newStrictHarness starts test/aapstrict, a provider written only from the AAP v1 contract, and a
// harness whose manager talks to it. When the test ends the provider's log must hold no 400, 404 or
// 409: nothing the manager sent on the plugin's behalf was refused.
func newStrictHarness(t *testing.T) (*th.Harness, *aapstrict.Server) {
	t.Helper()
	p, err := aapstrict.New(aapstrict.Options{Credential: strictCredential})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	base := p.Start()
	t.Cleanup(p.Close)
	t.Cleanup(func() {
		for _, ex := range p.Log() {
			switch ex.Status {
			case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict:
				t.Errorf("the strict provider refused %s %s: %d %s", ex.Method, ex.Path, ex.Status, ex.Code)
			}
		}
	})
	h := newHarness(t, th.WithExternalProvider(base, strictCredential))
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	return h, p
}

// strictPending waits for the call to await approval and returns its request at the strict provider.
func strictPending(h *th.Harness, p *aapstrict.Server, name string) aapstrict.Request {
	tc := h.WaitPhase(name, tg.PhaseAwaitingApproval)
	req, ok := p.Get(tc.Status.RequestID)
	h.G.Expect(ok).To(BeTrue(), "status.requestID %q is a request the provider holds", tc.Status.RequestID)
	return req
}

// kubectl toolcall run against a provider that implements only AAP v1: with and without --timeout
// (without it the manager picks the largest timeout that fits, in one unit), an approval prints the
// tool's result and a denial exits with its code and the human's note.
func TestRunAgainstAStrictProvider(t *testing.T) {
	for _, c := range []struct {
		name string
		flag []string
		want string
	}{
		{"with --timeout", []string{"--timeout", "1h30m"}, "90m"},
		{"without --timeout", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, p := newStrictHarness(t)
			g := h.G
			args := append([]string{"run", "issue_refund", "--args", th.RefundArgs, "--waiting-limit", "2h", "-n", h.NS}, c.flag...)

			inv := start(t.Context(), append(args, "--name", "approved")...)
			req := strictPending(h, p, "approved")
			if c.want != "" {
				g.Expect(req.Timeout).To(Equal(c.want))
			} else {
				g.Expect(req.Timeout).To(MatchRegexp(`^[1-9][0-9]*m$`), "the default timeout is whole minutes")
			}
			g.Expect(req.Arguments).To(MatchJSON(th.RefundArgs))
			_, err := p.Approve(req.ID, 5*time.Minute, "The duplicate charge has been confirmed.")
			g.Expect(err).NotTo(HaveOccurred())
			running := h.WaitPhase("approved", tg.PhaseRunning)
			g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
			h.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
			g.Expect(inv.exit(g)).To(Equal(exitSucceeded))
			g.Expect(inv.stdout.String()).To(Equal(`{"refund_id":"re_1"}` + "\n"))

			inv = start(t.Context(), append(args, "--name", "denied")...)
			req = strictPending(h, p, "denied")
			_, err = p.Deny(req.ID, "Not a duplicate.")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(inv.exit(g)).To(Equal(exitDenied))
			g.Expect(inv.stderr.String()).To(ContainSubstring("  approver note: Not a duplicate.\n"))
		})
	}
}

// Ctrl-C against a provider that implements only AAP v1: the ToolCall is deleted and its request
// ends cancelled at the provider, through DELETE.
func TestRunInterruptedCancelsAtAStrictProvider(t *testing.T) {
	h, p := newStrictHarness(t)
	g := h.G
	ctx, interrupt := context.WithCancel(t.Context())
	inv := start(ctx, "run", "issue_refund", "--args", th.RefundArgs, "--waiting-limit", "2m", "--name", "refund", "-n", h.NS)
	req := strictPending(h, p, "refund")
	g.Eventually(inv.stderr.String).Should(ContainSubstring("toolcall refund: AwaitingApproval"))
	interrupt()

	g.Expect(inv.exit(g)).To(Equal(exitInterrupted))
	h.WaitGone("refund", 20*time.Second)
	got, ok := p.Get(req.ID)
	g.Expect(ok).To(BeTrue())
	g.Expect(got.Status).To(Equal(aapstrict.StatusCancelled))
	var deletes int
	for _, ex := range p.Log() {
		if ex.Method == http.MethodDelete && strings.HasSuffix(ex.Path, "/v1/requests/"+req.ID) {
			deletes++
		}
	}
	g.Expect(deletes).To(BeNumerically(">=", 1), "cancelled through DELETE /v1/requests/{id}")
}
