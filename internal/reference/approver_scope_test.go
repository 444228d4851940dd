package reference_test

import (
	"encoding/json"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
)

// An approver scoped by ApproverInstances sees and decides the requests of the instances in their
// scope only, in the admin API and on the approval page; an approver without a scope, and the admin,
// see all. A scope names instances by id: a provisioner that names an instance after another team's
// gets no place in front of that team's approver. The admin grants and revokes instances through the
// admin API, and grants survive a restart.
func TestScopedApproverSeesOnlyTheirInstances(t *testing.T) {
	const bobCredential = "bob-approver-credential"
	var opts *reference.Options
	e := start(t, func(o *reference.Options) {
		o.Approvers = map[string]string{"alice": aliceCredential, "bob": bobCredential}
		o.ApproverInstances = map[string][]string{"alice": {}}
		opts = o
	})
	a := e.provision("key-a", `{"instance_name":"team-a"}`, http.StatusCreated)
	b := e.provision("key-b", `{"instance_name":"team-b"}`, http.StatusCreated)
	impostor := e.provision("key-c", `{"instance_name":"team-a"}`, http.StatusCreated) // the same name, another instance
	ofA := e.expectRequest(e.do(e.submitRequestAs(a.Credential.Token, "call-a", refund())), http.StatusCreated)
	ofB := e.expectRequest(e.do(e.submitRequestAs(b.Credential.Token, "call-b", refund())), http.StatusCreated)
	ofImpostor := e.expectRequest(e.do(e.submitRequestAs(impostor.Credential.Token, "call-c", refund())), http.StatusCreated)

	listed := func(token string) []string {
		r := e.do(e.requestAs(token, http.MethodGet, "/admin/v1/requests", nil))
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var all []reference.AdminRequest
		e.g.Expect(json.Unmarshal(r.body, &all)).To(Succeed())
		var ids []string
		for _, x := range all {
			ids = append(ids, x.ID)
		}
		return ids
	}
	scope := func(r response) reference.ApproverScope {
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var out reference.ApproverScope
		e.g.Expect(json.Unmarshal(r.body, &out)).To(Succeed())
		return out
	}
	grant := func(token, method, approver, id string) response {
		return e.do(e.requestAs(token, method, "/admin/v1/approvers/"+approver+"/instances/"+id, nil))
	}
	e.g.Expect(listed(aliceCredential)).To(BeEmpty(), "a scope with no instance yet shows nothing")

	e.g.Expect(scope(grant(adminCredential, http.MethodPut, "alice", a.Instance.ID))).To(Equal(
		reference.ApproverScope{Name: "alice", Scoped: true, Granted: []string{a.Instance.ID}}))
	e.g.Expect(listed(aliceCredential)).To(ConsistOf(ofA.ID), "alice sees team-a's request only, not the impostor's of the same name")
	e.g.Expect(listed(bobCredential)).To(ConsistOf(ofA.ID, ofB.ID, ofImpostor.ID), "bob has no scope")
	e.g.Expect(listed(adminCredential)).To(ContainElements(ofA.ID, ofB.ID, ofImpostor.ID), "the admin sees every instance")

	decide := func(token, id string) response {
		return e.do(e.requestAs(token, http.MethodPost, "/admin/v1/requests/"+id+"/decide", map[string]string{"status": "denied"}))
	}
	e.expectError(decide(aliceCredential, ofB.ID), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(decide(aliceCredential, ofImpostor.ID), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(e.srv.Get(ofImpostor.ID)).To(HaveField("Status", provider.StatusPending), "alice could not decide the impostor's request")

	// Only the admin grants; a grant names an approver with a scope and an instance that exists.
	e.expectError(grant(aliceCredential, http.MethodPut, "alice", b.Instance.ID), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectError(grant(provisioner, http.MethodPut, "alice", b.Instance.ID), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectError(grant(adminCredential, http.MethodPut, "bob", b.Instance.ID), http.StatusBadRequest, provider.CodeInvalidRequest)
	e.expectError(grant(adminCredential, http.MethodPut, "carol", b.Instance.ID), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(grant(adminCredential, http.MethodPut, "alice", "team-b"), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(listed(aliceCredential)).To(ConsistOf(ofA.ID))

	// Grants are kept in the store.
	e.g.Expect(e.srv.Close()).To(Succeed())
	e.open(*opts)
	e.g.Expect(listed(aliceCredential)).To(ConsistOf(ofA.ID), "the grant survived the restart")

	e.g.Expect(decide(aliceCredential, ofA.ID).status).To(Equal(http.StatusOK))
	e.g.Expect(e.srv.Get(ofA.ID)).To(HaveField("Status", provider.StatusDenied))

	e.g.Expect(scope(grant(adminCredential, http.MethodDelete, "alice", a.Instance.ID)).Granted).To(BeEmpty())
	e.g.Expect(listed(aliceCredential)).To(BeEmpty(), "revoked")
}

// The approval page of a scoped approver lists their instances' requests only and refuses to decide
// another's.
func TestScopedApproverPageShowsOnlyTheirInstances(t *testing.T) {
	p := startPage(t, func(o *reference.Options) {
		withAlice(o)
		o.ApproverInstances = map[string][]string{"alice": {"0b6a3f4e-8a61-4bbf-9d1e-2f4c5a6b7c8d"}}
	})
	id := p.create("key-1").ID // the static credential's default instance, outside alice's scope
	r := p.signIn(aliceCredential)
	set, err := http.ParseSetCookie(r.header.Get("Set-Cookie"))
	p.g.Expect(err).NotTo(HaveOccurred())
	alice := &http.Cookie{Name: set.Name, Value: set.Value}

	page := p.send(p.pageRequest(http.MethodGet, "/ui/", alice, nil))
	p.g.Expect(page.status).To(Equal(http.StatusOK))
	p.g.Expect(string(page.body)).NotTo(ContainSubstring(id))
	p.g.Expect(p.send(p.pageRequest(http.MethodGet, "/ui/", p.session(), nil)).body).To(ContainSubstring(id), "the admin's page lists it")
	p.g.Expect(p.decide(alice, id, "approve", []byte(`{"valid_for_minutes":5}`)).status).To(Equal(http.StatusNotFound))
}

// A scope must name an approver, and instances by id, never by name.
func TestApproverScopeIsChecked(t *testing.T) {
	g := NewWithT(t)
	_, err := reference.New(reference.Options{Credential: credential, Approvers: map[string]string{"alice": aliceCredential},
		ApproverInstances: map[string][]string{"bob": {}}})
	g.Expect(err).To(MatchError(ContainSubstring("ApproverInstances names bob, who is not one of Approvers")))
	_, err = reference.New(reference.Options{Credential: credential, Approvers: map[string]string{"alice": aliceCredential},
		ApproverInstances: map[string][]string{"alice": {"team-a"}}})
	g.Expect(err).To(MatchError(ContainSubstring(`approver alice's scope names "team-a", which is not an instance id`)))
}
