package reference_test

// The provider checklist of AAP v1 (specification section 8, "Provider Requirements"): one named test
// per item, against the reference provider over real sockets, with a plain net/http client. Every
// object is decoded strictly (helpers_test.go: aapRequest, aapError, aapInstance, aapProvisioned,
// which have exactly the fields of openapi.yaml), so a field the provider adds fails the test.

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// 1. Authenticate credentials and authorize access to requests.
func TestProvider01_AuthenticatesCredentialsAndAuthorizesAccessToRequests(t *testing.T) {
	e := start(t)
	other := e.provision("other", `{"instance_name":"other"}`, http.StatusCreated)
	mine := e.create("mine")

	// No credential, or one nobody holds: 401, and the body never repeats what was sent.
	for _, auth := range []string{"", "Bearer nobody-has-this", "Basic " + credential} {
		req := e.request(http.MethodGet, "/v1/requests/"+mine.ID, nil)
		req.Header.Set("Authorization", auth)
		r := e.do(req)
		e.expectError(r, http.StatusUnauthorized, provider.CodeUnauthenticated)
		e.g.Expect(string(r.body)).NotTo(ContainSubstring("nobody-has-this"))
		e.g.Expect(string(r.body)).NotTo(ContainSubstring(credential))
	}

	// Another instance's request is unavailable to it: 404, and it stays as it was.
	e.expectError(e.do(e.requestAs(other.Credential.Token, http.MethodGet, "/v1/requests/"+mine.ID, nil)), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.do(e.requestAs(other.Credential.Token, http.MethodGet, "/v1/requests/"+mine.ID+"?wait=1s", nil)), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.do(e.requestAs(other.Credential.Token, http.MethodDelete, "/v1/requests/"+mine.ID, nil)), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(e.expectRequest(e.get(mine.ID, ""), http.StatusOK)).To(Equal(mine))

	// The provisioner token makes no approval requests; an instance credential manages no instances.
	e.expectError(e.do(e.submitRequestAs(provisioner, "p", refund())), http.StatusForbidden, provider.CodeForbidden)
	e.expectError(e.do(e.requestAs(provisioner, http.MethodGet, "/v1/requests/"+mine.ID, nil)), http.StatusForbidden, provider.CodeForbidden)
	e.expectError(e.do(e.requestAs(provisioner, http.MethodDelete, "/v1/requests/"+mine.ID, nil)), http.StatusForbidden, provider.CodeForbidden)
	for _, token := range []string{credential, other.Credential.Token} {
		req := e.requestAs(token, http.MethodPost, "/v1/instances", []byte(`{}`))
		req.Header.Set(provider.HeaderIdempotencyKey, "i")
		e.expectError(e.do(req), http.StatusForbidden, provider.CodeForbidden)
		e.expectError(e.do(e.requestAs(token, http.MethodGet, "/v1/instances/"+other.Instance.ID, nil)), http.StatusForbidden, provider.CodeForbidden)
		e.expectError(e.do(e.requestAs(token, http.MethodDelete, "/v1/instances/"+other.Instance.ID, nil)), http.StatusForbidden, provider.CodeForbidden)
	}
	e.g.Expect(e.expectInstance(e.instance(other.Instance.ID)).Name).To(Equal("other"))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
}

// 2. Support request creation, retrieval, long polling and cancellation.
func TestProvider02_SupportsCreationRetrievalLongPollingAndCancellation(t *testing.T) {
	e := start(t)
	created := e.expectRequest(e.submit("k", refund()), http.StatusCreated)
	e.g.Expect(created.Status).To(Equal(provider.StatusPending))
	e.g.Expect(e.expectRequest(e.get(created.ID, ""), http.StatusOK)).To(Equal(created))

	// A long poll returns when the request becomes terminal, or pending when its wait ends.
	var r response
	e.g.Eventually(e.poll(context.Background(), created.ID, "1s")).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusPending))
	approvedLater := e.create("decided")
	polled := e.poll(context.Background(), approvedLater.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))
	_, err := e.srv.Decide(approvedLater.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Eventually(polled).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusApproved))

	// DELETE cancels (again: the same), and ends the long polls with the cancelled request.
	polled = e.poll(context.Background(), created.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))
	cancelled := e.expectRequest(e.cancel(created.ID), http.StatusOK)
	e.g.Expect(cancelled.Status).To(Equal(provider.StatusCancelled))
	e.g.Eventually(polled).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK)).To(Equal(cancelled))
	e.g.Expect(e.expectRequest(e.cancel(created.ID), http.StatusOK)).To(Equal(cancelled))
	e.g.Expect(e.expectRequest(e.get(created.ID, "?wait=30s"), http.StatusOK)).To(Equal(cancelled))
}

// 3. Preserve request identity across retries and reject conflicting reuse of an idempotency key.
func TestProvider03_PreservesRequestIdentityAcrossRetriesAndRejectsConflictingKeyReuse(t *testing.T) {
	e := start(t)
	// A lost response: the request was created; the retry with the same key recovers it.
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Count: 1})).To(Succeed())
	_, err := e.try(e.submitRequest("attempt-1", refund()))
	e.g.Expect(err).To(HaveOccurred())
	recovered := e.expectRequest(e.submit("attempt-1", []byte(`{"timeout":"30m","arguments":{"currency":"GBP","amount":4900,"payment_id":"payment_123"},"tool":"issue_refund"}`)), http.StatusOK)
	e.g.Expect(e.srv.List("")).To(HaveExactElements(HaveField("ID", recovered.ID)))

	// The same key with other fields: 409 idempotency_conflict, the original untouched.
	other := refund()
	other.Arguments = json.RawMessage(`{"payment_id": "payment_123", "amount": 490000, "currency": "GBP"}`)
	e.expectError(e.submit("attempt-1", other), http.StatusConflict, provider.CodeIdempotencyConflict)
	e.g.Expect(e.expectRequest(e.get(recovered.ID, ""), http.StatusOK)).To(Equal(recovered))

	// Keys are scoped to the instance: another instance's same key is another request.
	agent := e.provision("agent", `{}`, http.StatusCreated)
	theirs := e.expectRequest(e.do(e.submitRequestAs(agent.Credential.Token, "attempt-1", other)), http.StatusCreated)
	e.g.Expect(theirs.ID).NotTo(Equal(recovered.ID))

	// Concurrent submissions of one key make one request.
	var wg sync.WaitGroup
	ids := make(chan string, 8)
	for range 8 {
		wg.Go(func() {
			r := e.submit("attempt-2", refund())
			ids <- e.expectRequest(r, r.status).ID
		})
	}
	wg.Wait()
	close(ids)
	distinct := map[string]bool{}
	for id := range ids {
		distinct[id] = true
	}
	e.g.Expect(distinct).To(HaveLen(1))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(3))
}

// 4. Record only one terminal outcome for each request: decisions, cancellation and expiry race, one wins.
func TestProvider04_RecordsOnlyOneTerminalOutcomePerRequest(t *testing.T) {
	e := start(t)
	decide := func(id, status string) response {
		return e.do(e.adminRequest(http.MethodPost, "/admin/v1/requests/"+id+"/decide", map[string]string{"status": status}))
	}
	for i := range 12 {
		body := refund()
		body.Timeout = "1m"
		req := e.expectRequest(e.submit(uuid.NewString(), body), http.StatusCreated)
		results := make(chan int, 3)
		var wg sync.WaitGroup
		wg.Go(func() { results <- decide(req.ID, provider.StatusApproved).status })
		wg.Go(func() { results <- decide(req.ID, provider.StatusDenied).status })
		wg.Go(func() { results <- e.cancel(req.ID).status })
		if i%3 == 0 {
			wg.Go(func() { e.clock.Step(time.Minute) }) // the deadline races too
		}
		wg.Wait()
		close(results)
		won := 0
		for status := range results {
			e.g.Expect(status).To(BeElementOf(http.StatusOK, http.StatusConflict))
			if status == http.StatusOK {
				won++
			}
		}
		final := e.expectRequest(e.get(req.ID, ""), http.StatusOK)
		if final.Status == provider.StatusExpired {
			e.g.Expect(won).To(BeZero(), "an expiry is the only outcome")
		} else {
			e.g.Expect(won).To(Equal(1), "exactly one contender recorded an outcome")
		}
		e.expectError(decide(req.ID, provider.StatusApproved), http.StatusConflict, provider.CodeAlreadyTerminal)
		e.g.Expect(e.expectRequest(e.get(req.ID, "?wait=1s"), http.StatusOK)).To(Equal(final), "and it never changes")
	}

	// A decision that lands just before the cancellation: the DELETE gets 409 and the decision stands.
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Kind: faults.DecideBeforeCancel, Count: 1})).To(Succeed())
	raced := e.create("raced")
	e.expectError(e.cancel(raced.ID), http.StatusConflict, provider.CodeAlreadyTerminal)
	e.g.Expect(e.expectRequest(e.get(raced.ID, ""), http.StatusOK).Status).To(Equal(provider.StatusApproved))
	e.g.Expect(e.stats().RacedDecisions).To(BeEquivalentTo(1))
}

// 5. Expire requests that remain pending at their deadline.
func TestProvider05_ExpiresRequestsThatRemainPendingAtTheirDeadline(t *testing.T) {
	e := start(t)
	body := refund()
	body.Timeout = "90s"
	req := e.expectRequest(e.submit("k", body), http.StatusCreated)
	e.g.Expect(req.DeadlineAt).To(BeTemporally("==", req.CreatedAt.Add(90*time.Second)))
	polled := e.poll(context.Background(), req.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))

	e.clock.Step(89 * time.Second)
	e.g.Expect(e.srv.Get(req.ID)).To(HaveField("Status", provider.StatusPending))
	e.clock.Step(time.Second)
	var r response
	e.g.Eventually(polled).Should(Receive(&r))
	expired := e.expectRequest(r, http.StatusOK)
	e.g.Expect(expired.Status).To(Equal(provider.StatusExpired))
	e.g.Expect(expired.Decision).To(Equal(&provider.Decision{Status: provider.StatusExpired, DecidedAt: &req.DeadlineAt}))

	// No approval after the deadline, and no cancellation of an expired request.
	r = e.do(e.adminRequest(http.MethodPost, "/admin/v1/requests/"+req.ID+"/decide", map[string]string{"status": "approved"}))
	e.expectError(r, http.StatusConflict, provider.CodeAlreadyTerminal)
	e.expectError(e.cancel(req.ID), http.StatusConflict, provider.CodeAlreadyTerminal)
	e.g.Expect(e.expectRequest(e.get(req.ID, ""), http.StatusOK)).To(Equal(expired))
}

// 6. Return consistent request and decision states per the OpenAPI contract, in both profiles.
func TestProvider06_ReturnsConsistentRequestAndDecisionStates(t *testing.T) {
	for _, profile := range []reference.Profile{reference.ProfileFull, reference.ProfileSeed} {
		t.Run(string(profile), func(t *testing.T) {
			e := start(t, func(o *reference.Options) { o.Profile = profile })
			// expectRequest checks every answer: AAP's fields only, a decision exactly when terminal and
			// of the same status, expires_at on approvals alone and later than decided_at.
			states := map[string]provider.Request{}
			states[provider.StatusPending] = e.create("pending")
			for _, status := range []string{provider.StatusApproved, provider.StatusDenied} {
				id := e.create(status).ID
				_, err := e.srv.Decide(id, status, "", nil)
				e.g.Expect(err).NotTo(HaveOccurred())
				states[status] = e.expectRequest(e.get(id, ""), http.StatusOK)
			}
			states[provider.StatusCancelled] = e.expectRequest(e.cancel(e.create("cancelled").ID), http.StatusOK)
			body := refund()
			body.Timeout = "1s"
			short := e.expectRequest(e.submit("expired", body), http.StatusCreated)
			e.clock.Step(time.Second)
			states[provider.StatusExpired] = e.expectRequest(e.get(short.ID, ""), http.StatusOK)

			for status, req := range states {
				e.g.Expect(req.Status).To(Equal(status))
				replay := refund()
				if status == provider.StatusExpired {
					replay = body
				}
				e.g.Expect(e.expectRequest(e.submit(status, replay), http.StatusOK)).To(Equal(req), "a replay answers the same state")
				e.g.Expect(e.expectRequest(e.get(req.ID, "?wait=1s"), http.StatusOK)).To(Equal(req))
			}
			e.g.Expect(states[provider.StatusCancelled].Decision.ExpiresAt).To(BeNil())
		})
	}
}

// 7. Keep the tool and arguments immutable after accepting a request.
func TestProvider07_KeepsToolAndArgumentsImmutable(t *testing.T) {
	e := start(t)
	const arguments = `{"z":1.50,"a":[1,{"c":null}],"big":12345678901234567890,"e":-2e3,"s":"caf\u00e9 <b>"}`
	body := []byte(`{"tool": "transfer", "timeout": "30m", "arguments": ` + arguments + `}`)
	created := e.expectRequest(e.submit("k", body), http.StatusCreated)
	e.g.Expect(string(created.Arguments)).To(Equal(arguments), "echoed as submitted: order, numbers and escapes kept")

	for _, change := range []string{
		`{"tool": "transfer_all", "timeout": "30m", "arguments": ` + arguments + `}`,
		`{"tool": "transfer", "timeout": "30m", "arguments": {"z":1.50,"a":[1,{"c":null}],"big":12345678901234567891,"e":-2e3,"s":"café <b>"}}`,
	} {
		e.expectError(e.submit("k", []byte(change)), http.StatusConflict, provider.CodeIdempotencyConflict)
	}
	_, err := e.srv.Decide(created.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.clock.Step(time.Hour)
	for _, got := range []provider.Request{
		e.expectRequest(e.get(created.ID, ""), http.StatusOK),
		e.expectRequest(e.submit("k", body), http.StatusOK),
	} {
		e.g.Expect(got.Tool).To(Equal("transfer"))
		e.g.Expect(string(got.Arguments)).To(Equal(arguments))
	}
}

// 8. Support instance creation, retrieval, updates and deletion within the provisioner token's scope,
// and return an instance-bound credential on creation.
func TestProvider08_SupportsInstanceLifecycleWithInstanceBoundCredentials(t *testing.T) {
	e := start(t)
	res := e.provision("laptop", `{"instance_name":"codex-chris-laptop"}`, http.StatusCreated)
	e.g.Expect(res.Instance.Name).To(Equal("codex-chris-laptop"))

	// The credential is bound to the instance: its requests are its own.
	token := res.Credential.Token
	req := e.expectRequest(e.do(e.submitRequestAs(token, "k", refund())), http.StatusCreated)
	e.expectRequest(e.do(e.requestAs(token, http.MethodGet, "/v1/requests/"+req.ID, nil)), http.StatusOK)
	e.expectError(e.get(req.ID, ""), http.StatusNotFound, provider.CodeNotFound)
	admin := e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests?instance="+res.Instance.ID, nil))
	var listed []reference.AdminRequest
	e.g.Expect(json.Unmarshal(admin.body, &listed)).To(Succeed())
	e.g.Expect(listed).To(HaveExactElements(And(HaveField("Request.ID", req.ID), HaveField("InstanceName", "codex-chris-laptop"))))

	// Reads return the instance, never its credential.
	r := e.instance(res.Instance.ID)
	e.g.Expect(e.expectInstance(r)).To(Equal(res.Instance))
	e.g.Expect(string(r.body)).NotTo(ContainSubstring(token))

	e.g.Expect(e.expectInstance(e.patchInstance(res.Instance.ID, "rename", `{"instance_name":"codex-chris-desktop"}`)).Name).
		To(Equal("codex-chris-desktop"))
	e.g.Expect(e.expectInstance(e.instance(res.Instance.ID)).Name).To(Equal("codex-chris-desktop"))

	deleted := e.deleteInstance(res.Instance.ID)
	e.g.Expect(deleted.status).To(Equal(http.StatusNoContent))
	e.g.Expect(deleted.body).To(BeEmpty())
	e.expectError(e.instance(res.Instance.ID), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.instance(uuid.NewString()), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.deleteInstance(uuid.NewString()), http.StatusNotFound, provider.CodeNotFound)
}

// 9. Retain approval requests, instance operation results and their idempotency keys for the required
// periods: seven days (168 hours) after decided_at; the purge follows the server's clock.
func TestProvider09_RetainsRequestsInstanceResultsAndKeysForTheRequiredPeriods(t *testing.T) {
	e := start(t)
	decided := e.create("decided")
	body := refund()
	body.Timeout = "2h"
	pending := e.expectRequest(e.submit("pending", body), http.StatusCreated)
	res := e.provision("kept", `{"instance_name":"kept"}`, http.StatusCreated)
	gone := e.provision("gone", `{}`, http.StatusCreated)
	e.g.Expect(e.deleteInstance(gone.Instance.ID).status).To(Equal(http.StatusNoContent))
	e.g.Expect(e.expectInstance(e.patchInstance(res.Instance.ID, "rename", `{"instance_name":"renamed"}`)).Name).To(Equal("renamed"))
	_, err := e.srv.Decide(decided.ID, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())

	// Seven days after the decision (and after the other request expired, 2 hours in) all is kept.
	e.clock.Step(reference.MinRetention)
	e.g.Expect(e.srv.Purge()).To(BeZero())
	e.g.Expect(e.expectRequest(e.submit("decided", refund()), http.StatusOK).ID).To(Equal(decided.ID))
	e.g.Expect(e.expectRequest(e.get(pending.ID, ""), http.StatusOK).Status).To(Equal(provider.StatusExpired))
	e.g.Expect(e.provision("kept", `{"instance_name":"kept"}`, http.StatusOK)).To(Equal(res), "the original result")
	e.g.Expect(e.expectInstance(e.patchInstance(res.Instance.ID, "rename", `{"instance_name":"renamed"}`)).Name).To(Equal("renamed"))
	e.expectError(e.provisionResponse("gone", `{}`), http.StatusConflict, provider.CodeInstanceDeleted)
	e.g.Expect(e.deleteInstance(gone.Instance.ID).status).To(Equal(http.StatusNoContent))

	// An hour later the periodic purge has removed what is past its retention, keys included.
	e.clock.Step(time.Hour)
	e.g.Eventually(func() int64 { return e.stats().Purged }).Should(BeEquivalentTo(1))
	e.expectError(e.get(decided.ID, ""), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(e.expectRequest(e.submit("decided", refund()), http.StatusCreated).ID).NotTo(Equal(decided.ID), "the key is free again")
	e.g.Expect(e.expectRequest(e.get(pending.ID, ""), http.StatusOK).Status).To(Equal(provider.StatusExpired), "its seven days are not over")
	e.expectError(e.deleteInstance(gone.Instance.ID), http.StatusNotFound, provider.CodeNotFound)
	// A live instance's provisioning key goes too, and with it the credential kept for replays: the key
	// no longer hands the credential out, and reusing it provisions a new instance, as AAP allows.
	again := e.provision("kept", `{"instance_name":"kept"}`, http.StatusCreated)
	e.g.Expect(again.Instance.ID).NotTo(Equal(res.Instance.ID))
	e.g.Expect(again.Credential.Token).NotTo(Equal(res.Credential.Token))
	e.g.Expect(e.expectInstance(e.instance(res.Instance.ID)).ID).To(Equal(res.Instance.ID), "the first instance lives on")
	e.g.Expect(e.do(e.submitRequestAs(res.Credential.Token, "still-works", refund())).status).To(Equal(http.StatusCreated),
		"and its credential still works")
	e.g.Expect(e.expectInstance(e.patchInstance(res.Instance.ID, "rename", `{"instance_name":"again"}`)).Name).To(Equal("again"),
		"seven days after it committed, an update's key is free again")

	e.clock.Step(time.Hour + time.Minute)
	e.g.Eventually(func() int64 { return e.stats().Purged }).Should(BeEquivalentTo(2))
	e.expectError(e.get(pending.ID, ""), http.StatusNotFound, provider.CodeNotFound)
}

// 10. Set a fixed expires_at later than decided_at on every approved decision and preserve it across
// reads and retries.
func TestProvider10_SetsAFixedExpiresAtLaterThanDecidedAt(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.Approvers = map[string]string{"alice": "alice-credential"} })
	approve := func(id string, body map[string]any) {
		body["status"] = provider.StatusApproved
		r := e.do(e.requestAs("alice-credential", http.MethodPost, "/admin/v1/requests/"+id+"/decide", body))
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
	}
	byDefault, validFor, past := e.create("default"), e.create("valid-for"), e.create("past")
	e.clock.Step(time.Minute)
	approve(byDefault.ID, map[string]any{})
	approve(validFor.ID, map[string]any{"valid_for": "1h"})
	approve(past.ID, map[string]any{"expires_at": e.clock.Now().Add(-time.Second)})

	for key, id := range map[string]string{"default": byDefault.ID, "valid-for": validFor.ID, "past": past.ID} {
		first := e.expectRequest(e.get(id, ""), http.StatusOK) // checks expires_at > decided_at
		for range 3 {
			e.clock.Step(10 * time.Minute)
			e.g.Expect(e.expectRequest(e.get(id, ""), http.StatusOK).Decision).To(Equal(first.Decision))
			e.g.Expect(e.expectRequest(e.submit(key, refund()), http.StatusOK).Decision).To(Equal(first.Decision))
		}
	}
	got, err := e.srv.Get(byDefault.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(got.Decision.ExpiresAt.Sub(*got.Decision.DecidedAt)).To(Equal(5 * time.Minute))
}

// 11. Revoke credentials, cancel pending requests and stop delivery when an instance is deleted,
// without changing existing terminal outcomes.
func TestProvider11_InstanceDeletionRevokesCancelsAndKeepsTerminalOutcomes(t *testing.T) {
	e := start(t)
	res := e.provision("agent", `{}`, http.StatusCreated)
	token := res.Credential.Token
	submit := func(key, timeout string) provider.Request {
		body := refund()
		body.Timeout = timeout
		return e.expectRequest(e.do(e.submitRequestAs(token, key, body)), http.StatusCreated)
	}
	approved, pending, overdue := submit("approved", "30m"), submit("pending", "30m"), submit("overdue", "1m")
	_, err := e.srv.Decide(approved.ID, provider.StatusApproved, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	approvedBefore, err := e.srv.Get(approved.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	unrelated := e.create("unrelated")
	polled := e.pollAs(context.Background(), token, pending.ID, "30s")
	e.g.Eventually(func() int64 { return e.stats().Waiting }).Should(BeEquivalentTo(1))
	e.clock.Step(time.Minute) // the overdue request's deadline passes, unread

	e.g.Expect(e.deleteInstance(res.Instance.ID).status).To(Equal(http.StatusNoContent))

	var r response
	e.g.Eventually(polled).Should(Receive(&r))
	e.g.Expect(e.expectRequest(r, http.StatusOK).Status).To(Equal(provider.StatusCancelled), "the long poll ends with the cancellation")
	e.g.Expect(e.srv.Get(pending.ID)).To(HaveField("Decision", &provider.Decision{Status: provider.StatusCancelled, DecidedAt: ptr(t0.Add(time.Minute))}))
	e.g.Expect(e.srv.Get(overdue.ID)).To(HaveField("Status", provider.StatusExpired), "past its deadline it expired, not cancelled")
	e.g.Expect(e.srv.Get(approved.ID)).To(Equal(approvedBefore), "a terminal outcome stays")
	e.g.Expect(e.srv.Get(unrelated.ID)).To(HaveField("Status", provider.StatusPending), "other instances' requests are untouched")

	for _, req := range []*http.Request{
		e.submitRequestAs(token, "after", refund()),
		e.requestAs(token, http.MethodGet, "/v1/requests/"+approved.ID, nil),
		e.requestAs(token, http.MethodDelete, "/v1/requests/"+pending.ID, nil),
	} {
		e.expectError(e.do(req), http.StatusUnauthorized, provider.CodeUnauthenticated)
	}
	// That deletion ends webhook delivery, and sends no notification of its cancellations, is
	// TestDeletingTheInstanceEndsDelivery's (delivery_test.go).
}

// 12. Make instance updates and deletion safe to retry without restoring a deleted instance or
// overwriting a later update.
func TestProvider12_InstanceUpdatesAndDeletionAreSafeToRetry(t *testing.T) {
	e := start(t)
	res := e.provision("p", `{"instance_name":"a"}`, http.StatusCreated)
	id := res.Instance.ID
	e.g.Expect(e.provision("p", `{"instance_name":"a"}`, http.StatusOK)).To(Equal(res), "the same credential, not renewed")
	e.expectError(e.provisionResponse("p", `{"instance_name":"b"}`), http.StatusConflict, provider.CodeIdempotencyConflict)

	e.expectInstance(e.patchInstance(id, "first", `{"instance_name":"b"}`))
	e.expectInstance(e.patchInstance(id, "second", `{"instance_name":"c"}`))
	e.g.Expect(e.expectInstance(e.patchInstance(id, "first", `{"instance_name":"b"}`)).Name).To(Equal("b"), "the original result")
	e.g.Expect(e.expectInstance(e.instance(id)).Name).To(Equal("c"), "the later update stands")

	// A deletion whose answer was lost is retried: 204 again, as long as the record is kept.
	e.g.Expect(e.srv.Faults().Set(faults.Rule{Op: faults.OpInstances, Kind: faults.DropAfterCommit, Count: 1})).To(Succeed())
	_, err := e.try(e.requestAs(provisioner, http.MethodDelete, "/v1/instances/"+id, nil))
	e.g.Expect(err).To(HaveOccurred())
	for range 2 {
		e.g.Expect(e.deleteInstance(id).status).To(Equal(http.StatusNoContent))
	}
	// Nothing restores it: not a provisioning replay, not an update or its replay.
	e.expectError(e.provisionResponse("p", `{"instance_name":"a"}`), http.StatusConflict, provider.CodeInstanceDeleted)
	e.expectError(e.patchInstance(id, "first", `{"instance_name":"b"}`), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.patchInstance(id, "third", `{"instance_name":"d"}`), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.instance(id), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.do(e.submitRequestAs(res.Credential.Token, "k", refund())), http.StatusUnauthorized, provider.CodeUnauthenticated)
	r := e.provisionResponse("p", `{"instance_name":"a"}`)
	e.g.Expect(strings.Contains(string(r.body), res.Credential.Token)).To(BeFalse(), "the deleted credential is never returned again")
}
