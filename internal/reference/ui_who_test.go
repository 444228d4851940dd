package reference_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/reference"
)

const aliceCredential = "alice-approver-credential"

func withAlice(o *reference.Options) { o.Approvers = map[string]string{"alice": aliceCredential} }

// An approver signs in with their own credential; the page says who is signed in, and their decisions
// record them in the note. The admin credential signs in as admin.
func TestApprovalPageRecordsWhoDecided(t *testing.T) {
	p := startPage(t, withAlice)
	first, second, third := p.create("key-1").ID, p.create("key-2").ID, p.create("key-3").ID

	r := p.signIn(aliceCredential)
	p.g.Expect(r.status).To(Equal(http.StatusSeeOther), string(r.body))
	set, err := http.ParseSetCookie(r.header.Get("Set-Cookie"))
	p.g.Expect(err).NotTo(HaveOccurred())
	alice := &http.Cookie{Name: set.Name, Value: set.Value}

	page := p.send(p.pageRequest(http.MethodGet, "/ui/", alice, nil))
	p.g.Expect(page.status).To(Equal(http.StatusOK))
	p.g.Expect(string(page.body)).To(ContainSubstring(`Signed in as <span id="approver-name">alice</span>`))

	approved := p.expectAdmin(p.decide(alice, first, "approve", []byte(`{"valid_for_minutes":5,"note":"Duplicate charge confirmed."}`)), http.StatusOK)
	p.g.Expect(approved.Decision.Note).To(Equal("Duplicate charge confirmed. (approved by alice)"))
	denied := p.expectAdmin(p.decide(p.session(), second, "deny", []byte(`{"note":"Not a duplicate."}`)), http.StatusOK)
	p.g.Expect(denied.Decision.Note).To(Equal("Not a duplicate. (denied by admin)"))
	// A note that claims another approver: the provider's record is still the last parenthesis.
	claimed := p.expectAdmin(p.decide(alice, third, "approve", []byte(`{"valid_for_minutes":5,"note":"ok (approved by bob)"}`)), http.StatusOK)
	p.g.Expect(claimed.Decision.Note).To(Equal("ok (approved by bob) (approved by alice)"))

	// A session cookie whose name was changed is no session.
	forged := &http.Cookie{Name: alice.Name, Value: alice.Value[:len("1234567890")] + ".Ym9i" + alice.Value[len("1234567890")+len(".YWxpY2U"):]}
	p.g.Expect(p.send(p.pageRequest(http.MethodGet, "/ui/events", forged, nil)).status).To(Equal(http.StatusUnauthorized))
	p.g.Expect(string(p.send(p.pageRequest(http.MethodGet, "/ui/", forged, nil)).body)).To(ContainSubstring(`action="/ui/sign-in"`))

	// An approver's credential is not the admin's: faults and stats stay admin-only.
	req := p.newRequest(http.MethodGet, "/admin/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+aliceCredential)
	p.g.Expect(p.send(req).status).To(Equal(http.StatusUnauthorized))
}

func TestApproversAreChecked(t *testing.T) {
	const ownCredential = "give each approver their own"
	for name, c := range map[string]struct {
		approvers map[string]string
		want      string // the error, after "reference provider: "
	}{
		"an empty credential": {map[string]string{"alice": ""}, "approver alice has an empty credential"},
		"a name with a space": {map[string]string{"al ice": "x"},
			`approver name "al ice": use 1 to 64 letters, digits and . _ @ + - (starting with a letter or digit)`},
		"the admin name": {map[string]string{"admin": "x"},
			`approver name "admin" is the name decisions made with the admin credential record: choose another`},
		"the provider credential": {map[string]string{"alice": credential},
			"approver alice's credential is the instance, admin or provisioner credential: " + ownCredential},
		"the provisioner token": {map[string]string{"alice": provisioner},
			"approver alice's credential is the instance, admin or provisioner credential: " + ownCredential},
		// Which of the two is named first depends on the map's order.
		"a credential shared by two": {map[string]string{"alice": "same", "bob": "same"}, "share a credential: give each their own"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := reference.New(reference.Options{Credential: credential, ProvisionerToken: provisioner, Approvers: c.approvers})
			if name == "a credential shared by two" {
				g.Expect(err).To(MatchError(MatchRegexp(`^reference provider: approvers (alice and bob|bob and alice) ` + c.want + `$`)))
				return
			}
			g.Expect(err).To(MatchError("reference provider: " + c.want))
		})
	}
}

// The page says which instance submitted each request (the default instance for the static
// credential, a provisioned instance's name for its credential), in the rows the server renders and
// in those the script adds, and in the recent list.
func TestApprovalPageShowsTheInstanceInBrowser(t *testing.T) {
	p := startPage(t, withAlice)
	agent := p.provision("agent", `{"instance_name":"refund-agent"}`, http.StatusCreated)
	before := p.expectRequest(p.do(p.submitRequestAs(agent.Credential.Token, "key-before", refund())), http.StatusCreated)
	static := p.create("key-static")

	b := newBrowser(t)
	b.openAs(p.url, aliceCredential)
	b.g.Expect(b.text("#approver-name")).To(Equal("alice"))
	renamed := p.patchInstance(agent.Instance.ID, "rename", `{"instance_name":"ops\u202ebot"}`)
	p.g.Expect(renamed.status).To(Equal(http.StatusOK), string(renamed.body))
	after := p.expectRequest(p.do(p.submitRequestAs(agent.Credential.Token, "key-after", refund())), http.StatusCreated)
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after.ID))))

	b.g.Expect(b.text(row(before.ID)+" .instance-name")).To(Equal("refund-agent"), "rendered by the server")
	b.g.Expect(b.text(row(before.ID) + " .instance-id")).To(Equal(agent.Instance.ID))
	b.g.Expect(b.text(row(static.ID) + " .instance-name")).To(Equal(reference.DefaultInstanceName))
	b.g.Expect(b.text(row(after.ID)+" .instance-name")).To(Equal(`ops\u202ebot`), "rendered by the script, an invisible override shown as an escape")

	b.do(
		chromedp.SendKeys(chromedp.CSS(row(before.ID)+" .note"), "Duplicate charge confirmed."),
		chromedp.Click(chromedp.CSS(row(before.ID)+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(`#recent-rows tr[data-id="`+before.ID+`"]`)),
	)
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + before.ID + `"] .instance`)).To(Equal(`ops\u202ebot`))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + before.ID + `"] .note`)).To(Equal("Duplicate charge confirmed. (approved by alice)"))
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
