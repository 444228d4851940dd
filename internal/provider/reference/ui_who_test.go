package reference_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
)

const aliceCredential = "alice-approver-credential"

func withAlice(o *reference.Options) { o.Approvers = map[string]string{"alice": aliceCredential} }

// submitAsRequester submits through Toolgate's provider client with the requester it sends.
func submitAsRequester(p *pageEnv, key, tool, arguments, requester string) *provider.Request {
	p.t.Helper()
	req, err := providerClient(p).Submit(context.Background(), provider.Submission{
		IdempotencyKey: key, Tool: tool, Arguments: json.RawMessage(arguments), Timeout: 30 * time.Minute, Requester: requester,
	})
	p.g.Expect(err).NotTo(HaveOccurred())
	return req
}

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

	approved := p.expectRequest(p.decide(alice, first, "approve", []byte(`{"valid_for_minutes":5,"note":"Duplicate charge confirmed."}`)), http.StatusOK)
	p.g.Expect(approved.Decision.Note).To(Equal("Duplicate charge confirmed. (approved by alice)"))
	denied := p.expectRequest(p.decide(p.session(), second, "deny", []byte(`{"note":"Not a duplicate."}`)), http.StatusOK)
	p.g.Expect(denied.Decision.Note).To(Equal("Not a duplicate. (denied by admin)"))
	// A note that claims another approver: the provider's record is still the last parenthesis.
	claimed := p.expectRequest(p.decide(alice, third, "approve", []byte(`{"valid_for_minutes":5,"note":"ok (approved by bob)"}`)), http.StatusOK)
	p.g.Expect(claimed.Decision.Note).To(Equal("ok (approved by bob) (approved by alice)"))

	// A session cookie whose name was changed is no session.
	forged := &http.Cookie{Name: alice.Name, Value: alice.Value[:len("1234567890")] + ".Ym9i" + alice.Value[len("1234567890")+len(".YWxpY2U"):]}
	p.g.Expect(p.send(p.pageRequest(http.MethodGet, "/ui/", forged, nil)).status).To(Equal(http.StatusUnauthorized))

	// An approver's credential is not the admin's: faults and stats stay admin-only.
	req := p.newRequest(http.MethodGet, "/admin/v1/stats", nil)
	req.Header.Set("Authorization", "Bearer "+aliceCredential)
	p.g.Expect(p.send(req).status).To(Equal(http.StatusUnauthorized))
}

func TestApproversAreChecked(t *testing.T) {
	g := NewWithT(t)
	for name, approvers := range map[string]map[string]string{
		"an empty credential":        {"alice": ""},
		"a name with a space":        {"al ice": "x"},
		"the admin name":             {"admin": "x"},
		"the provider credential":    {"alice": credential},
		"a credential shared by two": {"alice": "same", "bob": "same"},
	} {
		_, err := reference.New(reference.Options{Credential: credential, Approvers: approvers})
		g.Expect(err).To(HaveOccurred(), name)
	}
}

// The page shows who asked, when the submission said, both in the rows the server renders and in
// those the script adds from the event stream; and who decided, in the recent list's note.
func TestApprovalPageShowsWhoAskedInBrowser(t *testing.T) {
	p := startPage(t, withAlice)
	const agent = "system:serviceaccount:payments:refund-agent"
	before := submitAsRequester(p, "key-before", "issue_refund", `{"amount": 4900}`, agent)
	anonymous := submitAsRequester(p, "key-anonymous", "issue_refund", `{"amount": 1}`, "")

	b := newBrowser(t)
	b.do(
		chromedp.Navigate(p.url+"/ui/?token="+aliceCredential),
		chromedp.WaitVisible(chromedp.CSS(`#connection[data-state="live"]`)),
	)
	b.g.Expect(b.text("#approver-name")).To(Equal("alice"))
	after := submitAsRequester(p, "key-after", "issue_refund", `{"amount": 2}`, "ops\u202ebot")
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after.ID))))

	b.g.Expect(b.text(row(before.ID)+" .requester")).To(Equal(agent), "rendered by the server")
	b.g.Expect(b.text(row(after.ID)+" .requester")).To(Equal(`ops\u202ebot`), "rendered by the script, an invisible override shown as an escape")
	for _, id := range []string{before.ID, after.ID} {
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .requester').hidden`))).To(BeFalse())
	}
	b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(anonymous.ID)+` .requester-label').hidden`))).
		To(BeTrue(), "nothing is shown when the provider was not told")

	b.do(
		chromedp.SendKeys(chromedp.CSS(row(before.ID)+" .note"), "Duplicate charge confirmed."),
		chromedp.Click(chromedp.CSS(row(before.ID)+" button.approve")),
		chromedp.WaitVisible(chromedp.CSS(`#recent-rows tr[data-id="`+before.ID+`"]`)),
	)
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + before.ID + `"] .requester`)).To(Equal(agent))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + before.ID + `"] .note`)).To(Equal("Duplicate charge confirmed. (approved by alice)"))
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
