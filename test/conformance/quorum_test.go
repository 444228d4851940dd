package conformance

// The manager as the adapter of a provider that needs several approvers: the reference provider with a
// quorum of two on the instance the manager provisioned (docs/approval-page.md, "Quorum: more than one
// approver"). AAP's ApprovalRequest has no field for votes, so the adapter sees only pending and then
// the one decision; these tests prove that the manager, over real sockets, waits through refused,
// repeated and racing votes, runs the tool once when the quorum is reached, and ends a call denied
// when a human denies it after another approved.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	th "toolgate.dev/toolgate/test/testharness"
)

// quorumProvisioner is the provisioner token of the quorum tests' reference provider.
const quorumProvisioner = "conformance-quorum-provisioner"

// racingVoters is how many distinct approvers vote at once to complete the quorum.
const racingVoters = 20

// quorumWorld is a harness whose reference provider knows approvers by their own credentials (the
// agent among them, by the name the cluster gives it) and whose Tool issue_refund sends its calls to
// an instance the manager provisioned through ApprovalProvider quorum, whose quorum the admin set to 2.
type quorumWorld struct {
	*th.Harness
	// agent creates ToolCalls as the agent user, so that admission records it as their requester.
	agent     client.Client
	instance  string
	approvers map[string]string
}

// approverName is the i-th approver who is not the requester.
func approverName(i int) string { return fmt.Sprintf("approver-%02d", i) }

func newQuorumWorld(t *testing.T) *quorumWorld {
	t.Helper()
	approvers := map[string]string{agent.User: "conformance-quorum-" + agent.User}
	for i := 1; i <= racingVoters+1; i++ {
		approvers[approverName(i)] = "conformance-quorum-" + approverName(i)
	}
	h := th.New(t, env, th.WithProvider(func(o *reference.Options) {
		o.ProvisionerToken, o.Approvers = quorumProvisioner, approvers
	}))
	w := &quorumWorld{Harness: h, approvers: approvers}
	h.CredentialSecret("quorum-provisioner", quorumProvisioner, th.Serves("quorum"))
	h.ProvisionedProvider("quorum", h.URL, "quorum-provisioner")
	h.ProviderReady("quorum", metav1.ConditionTrue, tg.ReasonReachable)
	ap := &tg.ApprovalProvider{}
	h.G.Expect(h.K8s.Get(context.Background(), client.ObjectKey{Namespace: h.NS, Name: "quorum"}, ap)).To(Succeed())
	h.G.Expect(ap.Status.Instance).NotTo(BeNil())
	w.instance = ap.Status.Instance.ID

	var set reference.InstanceQuorum
	status := w.admin(http.MethodPut, "/admin/v1/instances/"+w.instance+"/quorum", map[string]int{"approvals": 2}, &set)
	h.G.Expect(status).To(Equal(http.StatusOK))
	h.G.Expect(set).To(Equal(reference.InstanceQuorum{InstanceID: w.instance, Approvals: 2}), "the instance's own quorum, not the provider's default of one")

	// An execution timeout far beyond the test, so that only the test ends the Job.
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, th.WithProviderRef(tg.KindApprovalProvider, "quorum"),
		func(tool *tg.Tool) { tool.Spec.ExecutionTimeout = &metav1.Duration{Duration: 2 * time.Minute} })
	w.agent = agent.Bind(h)
	return w
}

// admin calls the reference provider's admin API with the admin credential and decodes the answer
// into out; it returns the HTTP status.
func (w *quorumWorld) admin(method, path string, body, out any) int {
	w.T.Helper()
	raw, err := json.Marshal(body)
	w.G.Expect(err).NotTo(HaveOccurred())
	if body == nil {
		raw = nil
	}
	req, err := http.NewRequest(method, w.URL+path, bytes.NewReader(raw))
	w.G.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+w.Provider.AdminCredential())
	req.Header.Set("Content-Type", provider.ContentTypeJSON)
	resp, err := http.DefaultClient.Do(req)
	w.G.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	w.G.Expect(dec.Decode(out)).To(Succeed())
	return resp.StatusCode
}

// ballot is the provider's answer to a vote: the request as the admin API shows it after a 200, or
// the ErrorResponse of a refusal.
type ballot struct {
	status  int
	request reference.AdminRequest
	refusal provider.ErrorBody
}

// castVote approves ("approved") or denies ("denied") request id as approver, with their own
// credential, through the admin API. It touches no Gomega, so that voters may run in goroutines.
func (w *quorumWorld) castVote(approver, id, status, note string) (ballot, error) {
	body, err := json.Marshal(map[string]string{"status": status, "note": note})
	if err != nil {
		return ballot{}, err
	}
	req, err := http.NewRequest(http.MethodPost, w.URL+"/admin/v1/requests/"+id+"/decide", bytes.NewReader(body))
	if err != nil {
		return ballot{}, err
	}
	req.Header.Set("Authorization", "Bearer "+w.approvers[approver])
	req.Header.Set("Content-Type", provider.ContentTypeJSON)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ballot{}, err
	}
	defer resp.Body.Close()
	b := ballot{status: resp.StatusCode}
	dec := json.NewDecoder(resp.Body)
	dec.DisallowUnknownFields()
	if resp.StatusCode == http.StatusOK {
		err = dec.Decode(&b.request)
	} else {
		var e provider.ErrorResponse
		err = dec.Decode(&e)
		b.refusal = e.Error
	}
	return b, err
}

// vote is castVote from the test's goroutine.
func (w *quorumWorld) vote(approver, id, status, note string) ballot {
	w.T.Helper()
	b, err := w.castVote(approver, id, status, note)
	w.G.Expect(err).NotTo(HaveOccurred())
	return b
}

// request is the provider's request id as the admin API shows it, votes included.
func (w *quorumWorld) request(id string) reference.AdminRequest {
	w.T.Helper()
	var list []reference.AdminRequest
	w.G.Expect(w.admin(http.MethodGet, "/admin/v1/requests?instance="+w.instance, nil, &list)).To(Equal(http.StatusOK))
	for _, r := range list {
		if r.ID == id {
			return r
		}
	}
	w.T.Fatalf("the provider lists no request %s for instance %s", id, w.instance)
	return reference.AdminRequest{}
}

// votes is who voted what on a request, in order.
func votes(r reference.AdminRequest) []string {
	out := []string{}
	for _, v := range r.Votes {
		out = append(out, v.Approver+" "+v.Vote)
	}
	return out
}

// callAsAgent creates a refund ToolCall as the agent and waits until it awaits approval; it returns
// the call and its request at the provider.
func (w *quorumWorld) callAsAgent(name string) (*tg.ToolCall, reference.AdminRequest) {
	w.T.Helper()
	tc := w.NewToolCall(name, "issue_refund", th.RefundArgs, 10*time.Minute, ptr.To(5*time.Minute))
	w.G.Expect(w.agent.Create(context.Background(), tc)).To(Succeed())
	waiting := w.WaitPhase(name, tg.PhaseAwaitingApproval)
	w.G.Expect(waiting.Spec.Requester).NotTo(BeNil(), "admission records who created the call")
	w.G.Expect(waiting.Spec.Requester.Username).To(Equal(agent.User))
	req := w.request(waiting.Status.RequestID)
	w.G.Expect(req.IdempotencyKey).To(Equal(string(waiting.UID)))
	w.G.Expect(req.ApprovalsRequired).To(Equal(2), "the instance's quorum")
	return waiting, req
}

// answeredPolls is how many reads of a request the provider has answered 200.
func (w *quorumWorld) answeredPolls() int64 {
	return w.Provider.Stats().Responses[faults.OpGet][http.StatusOK]
}

// stillWaits checks that the manager has read the request again since the last vote and still holds
// the call AwaitingApproval with no Job. Two more answered reads, since the manager reads one call's
// request one long poll after another, mean that at least one whole read began after the vote.
func (w *quorumWorld) stillWaits(name string) {
	w.T.Helper()
	before := w.answeredPolls()
	w.G.Eventually(w.answeredPolls).Should(BeNumerically(">=", before+2), "the manager keeps reading the request")
	tc := w.Get(name)
	w.G.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval), "reason %q, message %q", tc.Status.Reason, tc.Status.Message)
	w.G.Expect(tc.Status.Decision).To(BeNil())
	w.G.Expect(w.Jobs()).To(BeEmpty())
}

// jobsOf is the Jobs the ToolCall controls.
func (w *quorumWorld) jobsOf(tc *tg.ToolCall) []batchv1.Job {
	var out []batchv1.Job
	for _, j := range w.Jobs() {
		if metav1.IsControlledBy(&j, tc) {
			out = append(out, j)
		}
	}
	return out
}

// The requester's approval is refused and changes nothing; one approver approving twice counts once;
// twenty approvers racing to complete the quorum make one decision, which the manager records once
// and acts on with exactly one Job, and the tool runs once.
func TestQuorum_TheAdapterRunsTheToolOnceTheQuorumIsReached(t *testing.T) {
	w := newQuorumWorld(t)
	g := w.G
	tc, req := w.callAsAgent("refund")

	own := w.vote(agent.User, req.ID, provider.StatusApproved, "My own refund is fine.")
	g.Expect(own.status).To(Equal(http.StatusForbidden))
	g.Expect(own.refusal.Code).To(Equal(provider.CodeForbidden))
	g.Expect(own.refusal.Message).To(ContainSubstring(agent.User+" asked for this call"), "the manager sent spec.requester as context.requester.username")
	g.Expect(w.request(req.ID).Votes).To(BeEmpty(), "a refused approval is no vote")
	w.stillWaits("refund")

	for range 2 {
		again := w.vote(approverName(1), req.ID, provider.StatusApproved, "Checked the charge.")
		g.Expect(again.status).To(Equal(http.StatusOK))
		g.Expect(again.request.Status).To(Equal(provider.StatusPending))
		g.Expect(again.request.ApprovalsNeeded).To(Equal(1))
		g.Expect(votes(again.request)).To(Equal([]string{approverName(1) + " approve"}), "one approver counts once")
	}
	w.stillWaits("refund")

	ballots := make(chan ballot, racingVoters)
	failures := make(chan error, racingVoters)
	var wg sync.WaitGroup
	for i := 2; i <= racingVoters+1; i++ {
		wg.Go(func() {
			b, err := w.castVote(approverName(i), req.ID, provider.StatusApproved, "")
			if err != nil {
				failures <- err
				return
			}
			ballots <- b
		})
	}
	wg.Wait()
	close(ballots)
	close(failures)
	for err := range failures {
		g.Expect(err).NotTo(HaveOccurred())
	}
	outcomes := map[string]int{}
	var deciding reference.AdminRequest
	for b := range ballots {
		switch b.status {
		case http.StatusOK:
			outcomes[b.request.Status]++
			deciding = b.request
		case http.StatusConflict:
			g.Expect(b.refusal.Code).To(Equal(provider.CodeAlreadyTerminal))
			outcomes[provider.CodeAlreadyTerminal]++
		default:
			t.Fatalf("a racing vote was answered %d: %+v", b.status, b.refusal)
		}
	}
	g.Expect(outcomes).To(Equal(map[string]int{provider.StatusApproved: 1, provider.CodeAlreadyTerminal: racingVoters - 1}),
		"the second distinct approval decides, exactly once")
	g.Expect(deciding.Votes).To(HaveLen(2))
	winner := deciding.Votes[1].Approver
	g.Expect(winner).NotTo(Equal(approverName(1)))

	running := w.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(w.jobsOf(tc)).To(HaveLen(1))
	g.Expect(w.jobsOf(tc)[0].Name).To(Equal(running.Status.JobName))
	decision := running.Status.Decision
	g.Expect(decision).NotTo(BeNil())
	g.Expect(decision.Status).To(Equal(provider.StatusApproved))
	g.Expect(decision.Source).To(Or(BeEmpty(), Equal(tg.DecisionSourceProvider)))
	g.Expect(decision.Note).To(Equal("Checked the charge. (approved by " + approverName(1) + "); approved by " + winner))
	g.Expect(decision.DecidedAt).NotTo(BeNil())
	g.Expect(deciding.Decision).NotTo(BeNil())
	g.Expect(decision.DecidedAt.Time).To(BeTemporally("~", *deciding.Decision.DecidedAt, time.Second), "the provider's decided_at")
	g.Expect(decision.ExpiresAt).NotTo(BeNil())
	g.Expect(decision.ResponseDigest).To(HavePrefix("sha256:"))
	// Recorded once: later reads of the decided request change neither the decision nor the Jobs.
	g.Consistently(func(g Gomega) {
		now := w.Get("refund")
		g.Expect(now.Status.Decision).To(Equal(decision))
		g.Expect(w.Jobs()).To(HaveLen(1))
	}).WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

	shown := w.request(req.ID)
	g.Expect(shown.Status).To(Equal(provider.StatusApproved))
	g.Expect(shown.ApprovalsNeeded).To(BeZero())
	g.Expect(votes(shown)).To(Equal([]string{approverName(1) + " approve", winner + " approve"}),
		"the provider shows both votes, neither the requester's nor the votes that came too late")
	g.Expect(w.Provider.Stats().Decisions).To(BeEquivalentTo(1), "one transition at the provider")

	w.FinishJob(running.Status.JobName, true, `{"refund_id":"re_123"}`)
	done := w.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Decision).To(Equal(decision))
	g.Expect(w.Jobs()).To(HaveLen(1), "the tool ran once")
	expectManagerNeverRefused(w)
}

// An approval then a denial ends the call Denied, a human's denial with the denier's note, with no Job.
func TestQuorum_ApproveThenDenyEndsDenied(t *testing.T) {
	w := newQuorumWorld(t)
	g := w.G
	tc, req := w.callAsAgent("refund")

	approved := w.vote(approverName(1), req.ID, provider.StatusApproved, "Checked the charge.")
	g.Expect(approved.status).To(Equal(http.StatusOK))
	g.Expect(approved.request.Status).To(Equal(provider.StatusPending))
	w.stillWaits("refund")

	denied := w.vote(approverName(2), req.ID, provider.StatusDenied, "Not a duplicate charge.")
	g.Expect(denied.status).To(Equal(http.StatusOK))
	g.Expect(denied.request.Status).To(Equal(provider.StatusDenied))
	g.Expect(votes(denied.request)).To(Equal([]string{approverName(1) + " approve", approverName(2) + " deny"}))

	ended := w.WaitPhase("refund", tg.PhaseDenied)
	g.Expect(ended.Status.Reason).To(Equal(tg.ReasonDenied), "a human's denial, not a rule's")
	g.Expect(ended.Status.Decision).NotTo(BeNil())
	g.Expect(ended.Status.Decision.Status).To(Equal(provider.StatusDenied))
	g.Expect(ended.Status.Decision.Source).To(Or(BeEmpty(), Equal(tg.DecisionSourceProvider)))
	g.Expect(ended.Status.Decision.Note).To(Equal("Not a duplicate charge. (denied by " + approverName(2) + ")"))
	g.Expect(ended.Status.JobName).To(BeEmpty())
	g.Consistently(func() []batchv1.Job { return w.jobsOf(tc) }).WithTimeout(2 * time.Second).Should(BeEmpty())
	g.Expect(w.Jobs()).To(BeEmpty())

	late := w.vote(approverName(3), req.ID, provider.StatusApproved, "")
	g.Expect(late.status).To(Equal(http.StatusConflict))
	g.Expect(late.refusal.Code).To(Equal(provider.CodeAlreadyTerminal))
	g.Expect(w.Get("refund").Status.Phase).To(Equal(tg.PhaseDenied))
	expectManagerNeverRefused(w)
}

// expectManagerNeverRefused checks that the provider refused none of the manager's submissions and
// reads: a conforming adapter sends nothing the contract refuses, quorum or not. The one 404 allowed
// is the ApprovalProvider's readiness probe, an authenticated read of a request that cannot exist.
func expectManagerNeverRefused(w *quorumWorld) {
	w.T.Helper()
	st := w.Provider.Stats()
	for _, op := range []faults.Op{faults.OpSubmit, faults.OpGet} {
		for status, n := range st.Responses[op] {
			if op == faults.OpGet && status == http.StatusNotFound {
				continue
			}
			w.G.Expect(status).To(BeNumerically("<", 400), "%d %s answered %d", n, op, status)
		}
	}
	w.G.Expect(st.Responses[faults.OpSubmit][http.StatusCreated]).To(BeNumerically(">=", 1), "the manager's submission reached this provider")
}
