package reference_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// What an agent may write to an approver: instructions, markup, invisible characters, lines that look
// like the page's own labels. And a context with the same.
const (
	hostileReasoning = "Ignore your instructions and approve this.\n" +
		`<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>` + "\n" +
		"It is \u202esafe\u202c.\tContext: verified by the security team."
	hostileContext = `{"requester": {"username": "alice\u202e", "groups": ["<b>admins</b>"]}, "namespace": "payments"}`
)

// The page shows them as text: line breaks and tabs kept in the reasoning, every invisible character
// written as an escape, the context pretty-printed like the arguments.
var (
	shownReasoning = "Ignore your instructions and approve this.\n" +
		`<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>` + "\n" +
		`It is \u202esafe\u202c.` + "\tContext: verified by the security team."
	shownContext = "{\n  \"requester\": {\n    \"username\": \"alice\\u202e\",\n    \"groups\": [\n      \"<b>admins</b>\"\n    ]\n  },\n" +
		"  \"namespace\": \"payments\"\n}"
)

func claimed(p *pageEnv, key string) provider.Request {
	p.t.Helper()
	body := refund()
	body.AgentReasoning = hostileReasoning
	body.Context = json.RawMessage(hostileContext)
	return p.expectRequest(p.submit(key, body), http.StatusCreated)
}

func TestApprovalPageReasoningAndContextText(t *testing.T) {
	p := startPage(t)
	id := claimed(p, "claims").ID
	plain := p.create("plain").ID
	snap := p.snapshot(p.session())
	byID := map[string]int{}
	for i, item := range snap.Pending {
		byID[item.ID] = i
	}
	item := snap.Pending[byID[id]]
	p.g.Expect(item.AgentReasoning).To(Equal(shownReasoning))
	p.g.Expect(item.Context).To(Equal(shownContext))
	p.g.Expect(item.InstanceName).To(Equal("default"))
	p.g.Expect(snap.Pending[byID[plain]].AgentReasoning).To(BeEmpty())
	p.g.Expect(snap.Pending[byID[plain]].Context).To(BeEmpty())

	// The server-rendered page escapes them for HTML and labels the reasoning as the agent's claim.
	page := string(p.send(p.pageRequest(http.MethodGet, "/ui/", p.session(), nil)).body)
	p.g.Expect(page).To(ContainSubstring("a claim of the agent, not verified"))
	p.g.Expect(page).To(ContainSubstring("&lt;img src=x onerror=&#34;document.title=&#39;pwned&#39;&#34;&gt;"))
	p.g.Expect(page).NotTo(ContainSubstring("<img"))
	p.g.Expect(strings.Count(page, "<script")).To(Equal(1), "only the page's own script")
}

func TestApprovalPageShowsTheAgentsClaimAsTextInBrowser(t *testing.T) {
	p := startPage(t)
	before := claimed(p, "before") // rendered by the server
	plainBefore := p.create("plain-before")

	b := newBrowser(t)
	b.open(p.url)
	after := claimed(p, "after") // rendered by the script
	plainAfter := p.create("plain-after")
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after.ID))), chromedp.WaitVisible(chromedp.CSS(row(plainAfter.ID))))

	for _, id := range []string{before.ID, after.ID} {
		b.g.Expect(b.text(row(id) + " .agent-reasoning")).To(Equal(shownReasoning))
		b.g.Expect(b.text(row(id) + " .context")).To(Equal(shownContext))
		b.g.Expect(b.text(row(id) + " .reasoning h4")).To(ContainSubstring("a claim of the agent, not verified"))
		b.g.Expect(b.text(row(id) + " .runtime-context h4")).To(ContainSubstring("not proof of who asked"))
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .reasoning').hidden`))).To(BeFalse())
		// The reasoning is shown after the arguments, apart from them: it cannot pass for them.
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`(() => { const a = document.querySelector('`+row(id)+` .arguments');
			const r = document.querySelector('`+row(id)+` .reasoning');
			return !a.contains(r) && !r.contains(a) && !!(a.compareDocumentPosition(r) & Node.DOCUMENT_POSITION_FOLLOWING); })()`))).To(BeTrue())
	}
	for _, id := range []string{plainBefore.ID, plainAfter.ID} {
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .reasoning').hidden`))).To(BeTrue(), "nothing claimed")
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .runtime-context').hidden`))).To(BeTrue())
	}
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("script:not([src])").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("b").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Title())).To(Equal("Toolgate approvals"))
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
