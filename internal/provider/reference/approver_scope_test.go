package reference_test

import (
	"encoding/json"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
)

// An approver scoped to some instances (ApproverInstances) sees and decides their requests only, in
// the admin API and on the approval page; an approver without a scope, and the admin, see all.
func TestScopedApproverSeesOnlyTheirInstances(t *testing.T) {
	const bobCredential = "bob-approver-credential"
	e := start(t, func(o *reference.Options) {
		o.Approvers = map[string]string{"alice": aliceCredential, "bob": bobCredential}
		o.ApproverInstances = map[string][]string{"alice": {"team-a"}}
	})
	a := e.provision("key-a", `{"instance_name":"team-a"}`, http.StatusCreated)
	b := e.provision("key-b", `{"instance_name":"team-b"}`, http.StatusCreated)
	ofA := e.expectRequest(e.do(e.submitRequestAs(a.Credential.Token, "call-a", refund())), http.StatusCreated)
	ofB := e.expectRequest(e.do(e.submitRequestAs(b.Credential.Token, "call-b", refund())), http.StatusCreated)

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
	e.g.Expect(listed(aliceCredential)).To(ConsistOf(ofA.ID), "alice sees team-a's request only")
	e.g.Expect(listed(bobCredential)).To(ConsistOf(ofA.ID, ofB.ID), "bob has no scope")
	e.g.Expect(listed(credential)).To(ContainElements(ofA.ID, ofB.ID), "the admin sees every instance")

	decide := func(token, id string) response {
		return e.do(e.requestAs(token, http.MethodPost, "/admin/v1/requests/"+id+"/decide", map[string]string{"status": "denied"}))
	}
	e.expectError(decide(aliceCredential, ofB.ID), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(e.srv.Get(ofB.ID)).To(HaveField("Status", provider.StatusPending), "alice could not decide team-b's request")
	e.g.Expect(decide(aliceCredential, ofA.ID).status).To(Equal(http.StatusOK))
	e.g.Expect(e.srv.Get(ofA.ID)).To(HaveField("Status", provider.StatusDenied))
}

// The approval page of a scoped approver lists their instances' requests only and refuses to decide
// another's.
func TestScopedApproverPageShowsOnlyTheirInstances(t *testing.T) {
	p := startPage(t, func(o *reference.Options) {
		withAlice(o)
		o.ApproverInstances = map[string][]string{"alice": {"nobody-else"}}
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

// A scope must name an approver, and at least one instance.
func TestApproverScopeIsChecked(t *testing.T) {
	g := NewWithT(t)
	_, err := reference.New(reference.Options{Credential: credential, Approvers: map[string]string{"alice": aliceCredential},
		ApproverInstances: map[string][]string{"bob": {"team-a"}}})
	g.Expect(err).To(MatchError(ContainSubstring("ApproverInstances names bob, who is not one of Approvers")))
	_, err = reference.New(reference.Options{Credential: credential, Approvers: map[string]string{"alice": aliceCredential},
		ApproverInstances: map[string][]string{"alice": {}}})
	g.Expect(err).To(MatchError(ContainSubstring("approver alice has an empty list of instances")))
}
