package reference_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
)

// voters are the approvers of the quorum tests, each with their own credential.
var voters = map[string]string{"alice": "alice-voter-credential", "bob": "bob-voter-credential", "carol": "carol-voter-credential"}

// withQuorum gives the provider the approvers of voters and a quorum of n.
func withQuorum(n int) func(*reference.Options) {
	return func(o *reference.Options) { o.Quorum, o.Approvers = n, voters }
}

// vote approves ("approved") or denies ("denied") a request through the admin API as an approver.
func (e *env) vote(approver, id, status, note string) response {
	e.t.Helper()
	token := voters[approver]
	if approver == reference.AdminApprover {
		token = adminCredential
	}
	return e.do(e.requestAs(token, http.MethodPost, "/admin/v1/requests/"+id+"/decide",
		map[string]string{"status": status, "note": note}))
}

// requestedBy submits refund() under key with the context Toolgate sends for a call username asked for.
func (e *env) requestedBy(key, username string) provider.Request {
	e.t.Helper()
	body := refund()
	body.Context = json.RawMessage(fmt.Sprintf(`{"namespace":"payments","requester":{"username":%q,"groups":["system:authenticated"]}}`, username))
	return e.expectRequest(e.submit(key, body), http.StatusCreated)
}

// votesOf is who voted what, in order.
func votesOf(r reference.AdminRequest) []string {
	out := []string{}
	for _, v := range r.Votes {
		out = append(out, v.Approver+" "+v.Vote)
	}
	return out
}

// One identity counts once: a second approval by alice is accepted and leaves the request pending,
// on the admin API and, strictly as AAP's ApprovalRequest, on the provider API.
func TestQuorumCountsAnApproverOnce(t *testing.T) {
	e := start(t, withQuorum(2))
	id := e.create("k").ID
	for range 2 {
		got := e.expectAdmin(e.vote("alice", id, provider.StatusApproved, "looks right"), http.StatusOK)
		e.g.Expect(got.Status).To(Equal(provider.StatusPending))
		e.g.Expect(got.Decision).To(BeNil())
		e.g.Expect(got.ApprovalsRequired).To(Equal(2))
		e.g.Expect(got.ApprovalsNeeded).To(Equal(1))
		e.g.Expect(votesOf(got)).To(Equal([]string{"alice approve"}))
		e.g.Expect(got.Votes[0].Note).To(Equal("looks right"))
		e.g.Expect(got.Votes[0].At).To(Equal(t0))
	}
	e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Status).To(Equal(provider.StatusPending))
	e.g.Expect(e.stats().Decisions).To(BeZero())

	approved := e.expectAdmin(e.vote("bob", id, provider.StatusApproved, ""), http.StatusOK)
	e.g.Expect(approved.Status).To(Equal(provider.StatusApproved))
	e.g.Expect(approved.ApprovalsNeeded).To(BeZero())
	e.g.Expect(votesOf(approved)).To(Equal([]string{"alice approve", "bob approve"}))
	e.g.Expect(approved.Decision.Note).To(Equal("looks right (approved by alice); approved by bob"))
	e.g.Expect(*approved.Decision.ExpiresAt).To(Equal(t0.Add(5 * time.Minute)))
	e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Decision).To(Equal(approved.Decision))
}

// The requester never approves their own call, whatever the quorum: 403 with an ErrorResponse that
// says why, and no vote. They may deny it.
func TestQuorumRefusesTheRequestersApproval(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("quorum %d", n), func(t *testing.T) {
			e := start(t, withQuorum(n))
			id := e.requestedBy("k", "carol").ID
			refused := e.expectError(e.vote("carol", id, provider.StatusApproved, "mine, fine"), http.StatusForbidden, provider.CodeForbidden)
			e.g.Expect(refused.Message).To(Equal("the requester cannot approve their own call: carol asked for this call " +
				"(its context.requester.username), so another approver must approve it"))
			list := e.expectAdminList(e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests", nil)))
			e.g.Expect(list).To(HaveLen(1))
			e.g.Expect(list[0].Votes).To(BeEmpty())
			e.g.Expect(list[0].Status).To(Equal(provider.StatusPending))

			for _, approver := range []string{"alice", "bob"}[:n] {
				e.expectAdmin(e.vote(approver, id, provider.StatusApproved, ""), http.StatusOK)
			}
			e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Status).To(Equal(provider.StatusApproved))

			own := e.requestedBy("k2", "carol").ID
			denied := e.expectAdmin(e.vote("carol", own, provider.StatusDenied, "Withdrawn."), http.StatusOK)
			e.g.Expect(denied.Decision.Note).To(Equal("Withdrawn. (denied by carol)"))

			// The admin credential is nobody in the cluster: a cluster user called admin does not lock it out.
			byAdminUser := e.requestedBy("k3", reference.AdminApprover).ID
			e.g.Expect(e.expectAdmin(e.vote(reference.AdminApprover, byAdminUser, provider.StatusApproved, ""), http.StatusOK).Votes).To(HaveLen(1))
		})
	}
}

// Any deny decides at once, with the denier's note, whatever approvals came before; votes after it are
// refused as for any terminal request.
func TestQuorumApproveThenDenyEndsDenied(t *testing.T) {
	e := start(t, withQuorum(3))
	id := e.create("k").ID
	e.expectAdmin(e.vote("alice", id, provider.StatusApproved, "fine"), http.StatusOK)
	e.expectAdmin(e.vote("bob", id, provider.StatusApproved, ""), http.StatusOK)
	denied := e.expectAdmin(e.vote("alice", id, provider.StatusDenied, "Not a duplicate after all."), http.StatusOK)
	e.g.Expect(denied.Status).To(Equal(provider.StatusDenied))
	e.g.Expect(denied.Decision.Note).To(Equal("Not a duplicate after all. (denied by alice)"))
	e.g.Expect(denied.Decision.ExpiresAt).To(BeNil())
	e.g.Expect(votesOf(denied)).To(Equal([]string{"alice approve", "bob approve", "alice deny"}))
	e.expectError(e.vote("carol", id, provider.StatusApproved, ""), http.StatusConflict, provider.CodeAlreadyTerminal)
	e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Decision.Status).To(Equal(provider.StatusDenied))
	e.g.Expect(e.stats().Decisions).To(BeEquivalentTo(1))
}

// Twenty approvers vote at once on a request that needs two, in asynchronous mode: exactly two
// approvals count, one vote turns the request approved, the other eighteen find it decided, and the
// instance's receiver gets exactly one notification.
func TestQuorumApprovesOnceUnderConcurrentVoters(t *testing.T) {
	ca := testcert.NewCA(t, "receivers")
	many := map[string]string{}
	for i := range 20 {
		many[fmt.Sprintf("voter%02d", i)] = fmt.Sprintf("voter%02d-credential", i)
	}
	e, _ := startWebhooks(t, ca, func(o *reference.Options) { o.Quorum, o.Approvers = 2, many })
	rc := newReceiver(t, ca)
	agent := e.hooked("p1", rc)
	req := e.createAs(agent.Credential.Token, "k")

	var wg sync.WaitGroup
	answers := make(chan response, len(many))
	for _, token := range many {
		wg.Go(func() {
			answers <- e.do(e.requestAs(token, http.MethodPost, "/admin/v1/requests/"+req.ID+"/decide", map[string]string{"status": provider.StatusApproved}))
		})
	}
	wg.Wait()
	close(answers)
	byOutcome := map[string]int{}
	for r := range answers {
		if r.status == http.StatusConflict {
			e.expectError(r, http.StatusConflict, provider.CodeAlreadyTerminal)
			byOutcome["already terminal"]++
			continue
		}
		byOutcome[e.expectAdmin(r, http.StatusOK).Status]++
	}
	e.g.Expect(byOutcome).To(Equal(map[string]int{provider.StatusPending: 1, provider.StatusApproved: 1, "already terminal": 18}))

	got := e.expectRequest(e.do(e.requestAs(agent.Credential.Token, http.MethodGet, "/v1/requests/"+req.ID, nil)), http.StatusOK)
	e.g.Expect(got.Status).To(Equal(provider.StatusApproved))
	list := e.expectAdminList(e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests", nil)))
	e.g.Expect(list[0].Votes).To(HaveLen(2))
	e.g.Expect(list[0].Votes[0].Approver).NotTo(Equal(list[0].Votes[1].Approver))
	e.g.Expect(e.stats().Decisions).To(BeEquivalentTo(1), "one transition")

	e.g.Eventually(rc.events).Should(HaveLen(1))
	e.g.Consistently(rc.events).WithTimeout(500*time.Millisecond).Should(HaveLen(1), "one notification")
	e.expectEvent(rc.events()[0], agent.Instance.ID, got)
	e.g.Expect(e.stats().Delivered).To(BeEquivalentTo(1))
}

// With a quorum of one (the default), one approval decides at once, with the note it always had.
func TestQuorumOfOneIsUnchanged(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.Approvers = voters })
	id := e.create("k").ID
	approved := e.expectAdmin(e.vote("alice", id, provider.StatusApproved, "Duplicate charge confirmed."), http.StatusOK)
	e.g.Expect(approved.Status).To(Equal(provider.StatusApproved))
	e.g.Expect(approved.Decision.Note).To(Equal("Duplicate charge confirmed. (approved by alice)"))
	e.g.Expect(approved.ApprovalsRequired).To(Equal(1))
	e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Decision).To(Equal(approved.Decision))
	e.g.Expect(e.stats().Decisions).To(BeEquivalentTo(1))
	// The Go API decides at once, with its note as given, whatever the quorum.
	q := start(t, withQuorum(2))
	decided, err := q.srv.Decide(q.create("k").ID, provider.StatusApproved, "ok", nil)
	q.g.Expect(err).NotTo(HaveOccurred())
	q.g.Expect(decided.Status).To(Equal(provider.StatusApproved))
	q.g.Expect(decided.Decision.Note).To(Equal("ok"))
}

// Votes are kept in the store: a request half approved before a restart needs only the rest after it.
func TestQuorumVotesSurviveRestart(t *testing.T) {
	e := start(t)
	opts := reference.Options{DBPath: filepath.Join(t.TempDir(), "restart.db"), Credential: credential, AdminCredential: adminCredential,
		Clock: e.clock, Approvers: voters, Quorum: 2}
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(opts)
	id := e.create("k").ID
	e.expectAdmin(e.vote("alice", id, provider.StatusApproved, "fine"), http.StatusOK)
	e.g.Expect(e.srv.Close()).To(Succeed())

	opts.Quorum = 3 // a request keeps the quorum it was created with
	e.open(opts)
	list := e.expectAdminList(e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests", nil)))
	e.g.Expect(votesOf(list[0])).To(Equal([]string{"alice approve"}))
	e.g.Expect(list[0].Votes[0].At).To(Equal(t0))
	e.g.Expect(list[0].ApprovalsNeeded).To(Equal(1))
	e.expectAdmin(e.vote("alice", id, provider.StatusApproved, ""), http.StatusOK)
	approved := e.expectAdmin(e.vote("bob", id, provider.StatusApproved, ""), http.StatusOK)
	e.g.Expect(approved.Decision.Note).To(Equal("fine (approved by alice); approved by bob"))
}

// A provisioned instance has its own quorum, set by the admin and kept in the store; the default
// instance takes the provider's.
func TestInstanceQuorum(t *testing.T) {
	e := start(t, withQuorum(2))
	agent := e.provision("agent", `{"instance_name":"agent"}`, http.StatusCreated)
	path := "/admin/v1/instances/" + agent.Instance.ID + "/quorum"
	quorum := func(r response) reference.InstanceQuorum {
		e.t.Helper()
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var q reference.InstanceQuorum
		strictly(e.g, r.body, &q)
		return q
	}
	e.g.Expect(quorum(e.do(e.adminRequest(http.MethodGet, path, nil)))).To(Equal(reference.InstanceQuorum{InstanceID: agent.Instance.ID, Approvals: 2, Default: true}))
	e.g.Expect(quorum(e.do(e.adminRequest(http.MethodPut, path, map[string]int{"approvals": 3})))).To(Equal(
		reference.InstanceQuorum{InstanceID: agent.Instance.ID, Approvals: 3}))

	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
	}{
		{"no approvals", path, map[string]any{}, http.StatusBadRequest, provider.CodeInvalidRequest},
		{"negative", path, map[string]int{"approvals": -1}, http.StatusBadRequest, provider.CodeInvalidRequest},
		{"too many", path, map[string]int{"approvals": reference.MaxQuorum + 1}, http.StatusBadRequest, provider.CodeInvalidRequest},
		{"unknown field", path, map[string]int{"quorum": 2}, http.StatusBadRequest, provider.CodeInvalidRequest},
		{"unknown instance", "/admin/v1/instances/6f1c2d3e-4b5a-4c6d-8e7f-9a0b1c2d3e4f/quorum", map[string]int{"approvals": 2}, http.StatusNotFound, provider.CodeNotFound},
		{"the default instance", "/admin/v1/instances/" + e.srv.DefaultInstance().ID + "/quorum", map[string]int{"approvals": 2}, http.StatusBadRequest, provider.CodeInvalidRequest},
	} {
		e.expectError(e.do(e.adminRequest(http.MethodPut, tc.path, tc.body)), tc.status, tc.code)
	}
	e.g.Expect(e.do(e.requestAs(voters["alice"], http.MethodPut, path, map[string]int{"approvals": 1})).status).To(Equal(http.StatusUnauthorized),
		"approvers do not set quorums")

	theirs := e.createAs(agent.Credential.Token, "k").ID
	ours := e.create("k").ID
	for _, approver := range []string{"alice", "bob"} {
		e.expectAdmin(e.vote(approver, theirs, provider.StatusApproved, ""), http.StatusOK)
		e.expectAdmin(e.vote(approver, ours, provider.StatusApproved, ""), http.StatusOK)
	}
	e.g.Expect(e.srv.Get(theirs)).To(HaveField("Status", provider.StatusPending), "the instance needs three")
	e.g.Expect(e.srv.Get(ours)).To(HaveField("Status", provider.StatusApproved), "the provider's default is two")
	e.expectAdmin(e.vote("carol", theirs, provider.StatusApproved, ""), http.StatusOK)
	e.g.Expect(e.srv.Get(theirs)).To(HaveField("Status", provider.StatusApproved))
}

// Options.Quorum is a number of approvers.
func TestQuorumIsChecked(t *testing.T) {
	for _, n := range []int{-1, reference.MaxQuorum + 1} {
		_, err := reference.New(reference.Options{Credential: credential, Quorum: n})
		NewWithT(t).Expect(err).To(MatchError(fmt.Sprintf("reference provider: Quorum %d is not a number of approvers: give 1 to 32 (0 means 1)", n)))
	}
}

// Toolgate's AAP client, as the manager polls, sees the request pending until the quorum is reached and
// the decision once it is.
func TestQuorumDecisionAsTheAdapterSeesIt(t *testing.T) {
	e := start(t, withQuorum(2))
	credFile := filepath.Join(t.TempDir(), "credential")
	e.g.Expect(os.WriteFile(credFile, []byte(credential), 0o600)).To(Succeed())
	client, err := provider.NewHTTPClient(provider.Options{BaseURL: e.url, CredentialFile: credFile})
	e.g.Expect(err).NotTo(HaveOccurred())
	sub := provider.Submission{IdempotencyKey: "toolcall-uid", Tool: "issue_refund", Timeout: 30 * time.Minute,
		Arguments: json.RawMessage(`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`),
		Context:   json.RawMessage(`{"requester":{"username":"carol"}}`)}
	ctx := context.Background()
	req, err := client.Submit(ctx, sub)
	e.g.Expect(err).NotTo(HaveOccurred())
	ref, err := sub.Ref()
	e.g.Expect(err).NotTo(HaveOccurred())
	ref.ID = req.ID

	e.expectError(e.vote("carol", req.ID, provider.StatusApproved, ""), http.StatusForbidden, provider.CodeForbidden)
	e.expectAdmin(e.vote("alice", req.ID, provider.StatusApproved, ""), http.StatusOK)
	pending, err := client.Wait(ctx, ref, time.Second)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(pending.Status).To(Equal(provider.StatusPending))
	e.g.Expect(pending.Decision).To(BeNil())

	type polled struct {
		req *provider.Request
		err error
	}
	waiting := make(chan polled, 1)
	go func() {
		got, err := client.Wait(ctx, ref, 30*time.Second)
		waiting <- polled{got, err}
	}()
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))
	e.expectAdmin(e.vote("bob", req.ID, provider.StatusApproved, "Duplicate charge confirmed."), http.StatusOK)
	var answer polled
	e.g.Eventually(waiting).Should(Receive(&answer), "the long poll returns with the decision")
	e.g.Expect(answer.err).NotTo(HaveOccurred())
	approved := answer.req
	e.g.Expect(approved.Status).To(Equal(provider.StatusApproved))
	e.g.Expect(approved.Decision.Note).To(Equal("approved by alice; Duplicate charge confirmed. (approved by bob)"))
	e.g.Expect(*approved.Decision.ExpiresAt).To(BeTemporally(">", *approved.Decision.DecidedAt))
}

// expectAdminList checks an admin API list answer and decodes it strictly.
func (e *env) expectAdminList(r response) []reference.AdminRequest {
	e.t.Helper()
	e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	var out []reference.AdminRequest
	strictly(e.g, r.body, &out)
	return out
}

// The page shows each request's votes (who, approve or deny, when, their note) and how many more
// approvals it needs: in the rows the server renders, in those the script adds, and as votes come in
// through the admin API or the page itself. An approval short of the quorum leaves the row in place.
func TestApprovalPageShowsVotesInBrowser(t *testing.T) {
	p := startPage(t, withQuorum(3))
	before := p.create("k1").ID
	p.expectAdmin(p.vote("bob", before, provider.StatusApproved, "Checked the charge."), http.StatusOK)

	b := newBrowser(t)
	b.openAs(p.url, voters["alice"])
	b.do(chromedp.WaitVisible(chromedp.CSS(row(before) + " .votes")))
	b.g.Expect(b.text(row(before)+" .approvals-needed")).To(Equal("2"), "rendered by the server")
	b.g.Expect(b.text(row(before) + " .approvals-required")).To(Equal("3"))
	b.g.Expect(b.text(row(before) + " .vote-list li .voter")).To(Equal("bob"))
	b.g.Expect(b.text(row(before) + " .vote-list li .vote")).To(Equal("approve"))
	b.g.Expect(b.text(row(before) + " .vote-list li .at")).To(Equal("2026-09-16T12:00:00Z"))
	b.g.Expect(b.text(row(before) + " .vote-list li .vote-note")).To(Equal("Checked the charge."))

	after := p.create("k2").ID
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after) + " .votes")))
	b.g.Expect(b.text(row(after)+" .approvals-needed")).To(Equal("3"), "rendered by the script")
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, row(after)+" .vote-list li")))).To(BeZero())

	// A vote through the admin API reaches the open page.
	p.expectAdmin(p.vote("carol", after, provider.StatusApproved, ""), http.StatusOK)
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after) + " .vote-list li")))
	b.g.Expect(b.text(row(after) + " .vote-list li .voter")).To(Equal("carol"))
	b.g.Expect(b.text(row(after) + " .approvals-needed")).To(Equal("2"))

	// Alice approves on the page: her approval is recorded, the request still waits for one more.
	b.do(
		chromedp.Click(chromedp.CSS(row(after)+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(row(after)+" .recorded")),
		chromedp.WaitVisible(chromedp.CSS(row(after)+" .vote-list li:nth-child(2)")),
	)
	b.g.Expect(b.text(row(after) + " .recorded")).To(Equal("Your approval is recorded: 1 more needed."))
	b.g.Expect(b.text(row(after) + " .vote-list li:nth-child(2) .voter")).To(Equal("alice"))
	b.g.Expect(b.text(row(after) + " .approvals-needed")).To(Equal("1"))

	// Bob's approval completes the quorum: the request leaves the pending list, approved by all three.
	p.expectAdmin(p.vote("bob", after, provider.StatusApproved, ""), http.StatusOK)
	recent := `#recent-rows tr[data-id="` + after + `"]`
	b.do(chromedp.WaitNotPresent(chromedp.CSS(row(after))), chromedp.WaitVisible(chromedp.CSS(recent)))
	b.g.Expect(b.text(recent + " .status")).To(Equal(provider.StatusApproved))
	b.g.Expect(b.text(recent + " .note")).To(Equal("approved by carol; approved by alice; approved by bob"))
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
