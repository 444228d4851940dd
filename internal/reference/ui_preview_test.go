package reference_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
)

// shownPreview is a request's preview as the page's event stream sends it.
type shownPreview struct {
	Failed  bool   `json:"failed"`
	Error   string `json:"error"`
	Format  string `json:"format"`
	Output  string `json:"output"`
	Cut     bool   `json:"cut"`
	Digest  string `json:"digest"`
	Image   string `json:"image"`
	ImageID string `json:"image_id"`
}

// The label the page gives a preview: the tool's own claim, which Toolgate does not check.
const previewLabel = "What the tool says this call would do — the tool's own claim, not verified"

const (
	previewDigest  = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
	previewImage   = "registry.example/refund-tool:1.2"
	previewImageID = "registry.example/refund-tool@sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
	// A JSON preview whose output holds markup and quotes, as a hostile tool may write.
	jsonPreview = `{"source": "tool", "format": "json", "output": {"refund": {"payment_id": "payment_123", "amount": 4900},
		"note": "<script>document.title='pwned'</script><img src=x onerror=\"document.title='pwned'\">", "quote": "say \"yes\" & 'no'"},
		"digest": "` + previewDigest + `", "image": "` + previewImage + `", "image_id": "` + previewImageID + `"}`
	shownJSONPreview = "{\n  \"refund\": {\n    \"payment_id\": \"payment_123\",\n    \"amount\": 4900\n  },\n" +
		"  \"note\": \"<script>document.title='pwned'</script><img src=x onerror=\\\"document.title='pwned'\\\">\",\n" +
		"  \"quote\": \"say \\\"yes\\\" & 'no'\"\n}"
	failedPreview = `{"source": "tool", "failed": true, "error": "preview Job refund-1-preview: exit code 1: <b>no such payment</b>",
		"image": "` + previewImage + `"}`
	shownFailure = "preview Job refund-1-preview: exit code 1: <b>no such payment</b>"
)

// submitPreview submits a refund whose context carries preview (raw JSON, or nothing when empty), as
// raw HTTP so that the stored context holds < and > as they are, and returns the request's id.
func submitPreview(p *pageEnv, key, preview string) string {
	p.t.Helper()
	context := `{"namespace": "payments", "tool_call": "refund-1"}`
	if preview != "" {
		context = `{"namespace": "payments", "tool_call": "refund-1", "preview": ` + preview + `}`
	}
	body := []byte(`{"tool": "issue_refund", "timeout": "30m", "arguments": {"payment_id": "payment_123", "amount": 4900}, ` +
		`"context": ` + context + `}`)
	return p.expectRequest(p.submit(key, body), http.StatusCreated).ID
}

func TestApprovalPagePreviewText(t *testing.T) {
	longLine := strings.Repeat("A", 4000)
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	cases := []struct {
		name, preview string
		shown         *shownPreview
	}{
		{"no context preview", "", nil},
		{"a null preview", `null`, nil},
		{"json, markup and quotes as text", jsonPreview, &shownPreview{Format: "json", Output: shownJSONPreview,
			Digest: previewDigest, Image: previewImage, ImageID: previewImageID}},
		{"text, line breaks kept and invisible characters escaped",
			`{"source": "tool", "format": "text", "output": "Would refund 49.00 GBP.\n<script>alert(1)</script> \"quoted\" \u202eevil",
			"digest": "sha256:ab", "image": "i"}`,
			&shownPreview{Format: "text", Output: "Would refund 49.00 GBP.\n<script>alert(1)</script> \"quoted\" \\u202eevil",
				Digest: "sha256:ab", Image: "i"}},
		{"a 4000-byte single line, whole", `{"source": "tool", "format": "text", "output": "` + longLine + `", "digest": "sha256:cd"}`,
			&shownPreview{Format: "text", Output: longLine, Digest: "sha256:cd"}},
		{"failed", failedPreview, &shownPreview{Failed: true, Error: shownFailure, Image: previewImage}},
		{"failed without a reason", `{"source": "tool", "failed": true}`, &shownPreview{Failed: true, Error: "no reason given"}},
		{"a format the page does not know", `{"source": "tool", "format": "html", "output": "<b>x</b>"}`,
			&shownPreview{Failed: true, Error: `the request's context.preview cannot be read (context.preview.format is "html": it must be json or text)`}},
		{"a format with an invisible character", `{"source": "tool", "format": "json\u202e", "output": {}}`,
			&shownPreview{Failed: true, Error: `the request's context.preview cannot be read (context.preview.format is "json\u202e": it must be json or text)`}},
		{"another source", `{"source": "agent", "format": "text", "output": "trust me"}`,
			&shownPreview{Failed: true, Error: `the request's context.preview cannot be read (context.preview.source is "agent": the page shows previews whose source is "tool")`}},
		{"text that is not a string", `{"source": "tool", "format": "text", "output": {"a": 1}}`,
			&shownPreview{Failed: true, Error: "the request's context.preview cannot be read (context.preview.output must be a string when context.preview.format is text)"}},
		{"not an object", `"a preview"`, &shownPreview{Failed: true, Error: "the request's context.preview cannot be read " +
			"(context.preview must be an object: source, format, output, digest, image and image_id, or source, failed, error and image)"}},
		{"a field of another type", `{"source": "tool", "format": "text", "output": "x", "digest": 12}`,
			&shownPreview{Failed: true, Error: "the request's context.preview cannot be read (context.preview.digest must be a string, not number)"}},
		{"failed, not a boolean", `{"source": "tool", "failed": "yes", "error": "x"}`,
			&shownPreview{Failed: true, Error: "the request's context.preview cannot be read (context.preview.failed must be true or false, not string)"}},
		{"no output", `{"source": "tool", "format": "json"}`,
			&shownPreview{Failed: true, Error: "the request's context.preview cannot be read (context.preview.output is missing: a preview that did not fail has an output)"}},
	}
	p := startPage(t)
	ids := map[string]string{}
	for i, tc := range cases {
		ids[tc.name] = submitPreview(p, fmt.Sprint("key-", i), tc.preview)
	}
	plain := p.create("no-context").ID
	longText := submitPreview(p, "long-text", `{"source": "tool", "format": "text", "output": "`+strings.Repeat("é", 10000)+`"}`)
	deepJSON := submitPreview(p, "deep-json", `{"source": "tool", "format": "json", "output": `+deep+`}`)

	shown := map[string]*shownPreview{}
	for _, r := range p.snapshot(p.session()).Pending {
		shown[r.ID] = r.Preview
	}
	for _, tc := range cases {
		p.g.Expect(shown[ids[tc.name]]).To(Equal(tc.shown), tc.name)
	}
	p.g.Expect(shown[plain]).To(BeNil(), "no context")

	// What the page renders is bounded, cut at a character, and says it was cut.
	p.g.Expect(shown[longText].Cut).To(BeTrue())
	p.g.Expect(shown[longText].Output).To(Equal(strings.Repeat("é", 8000)))
	p.g.Expect(shown[deepJSON].Cut).To(BeTrue())
	p.g.Expect(len(shown[deepJSON].Output)).To(BeNumerically("<=", 16000))
	p.g.Expect(shown[deepJSON].Output).To(HavePrefix("[\n  [\n    [\n"))
	p.g.Expect(shown[ids["a 4000-byte single line, whole"]].Cut).To(BeFalse())
}

func TestApprovalPageRendersThePreviewEscaped(t *testing.T) {
	p := startPage(t)
	submitPreview(p, "json", jsonPreview)
	page := string(p.send(p.pageRequest(http.MethodGet, "/ui/", p.session(), nil)).body)
	p.g.Expect(page).To(ContainSubstring(`What the tool says this call would do <span class="claim">— the tool's own claim, not verified`))
	p.g.Expect(page).To(ContainSubstring(`<section class="preview">`), "shown: not hidden")
	p.g.Expect(page).To(ContainSubstring("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&lt;img src=x onerror=\\&#34;"))
	p.g.Expect(page).To(ContainSubstring(`<dd class="preview-digest">` + previewDigest + `</dd>`))
	p.g.Expect(page).To(ContainSubstring(`<dd class="preview-image-id">` + previewImageID + `</dd>`))
	p.g.Expect(page).NotTo(ContainSubstring("<img"))
	p.g.Expect(strings.Count(page, "<script")).To(Equal(1), "only the page's own script")

	// Without a preview the section is there (for the script to fill in) but hidden.
	plain := startPage(t)
	plain.create("plain")
	page = string(plain.send(plain.pageRequest(http.MethodGet, "/ui/", plain.session(), nil)).body)
	p.g.Expect(page).NotTo(ContainSubstring(`<section class="preview">`))
	p.g.Expect(strings.Count(page, `<section class="preview" hidden>`)).To(Equal(2), "the request's and the template's")
}

func TestApprovalPageShowsThePreviewAsTextInBrowser(t *testing.T) {
	p := startPage(t)
	longLine := submitPreview(p, "long-line", `{"source": "tool", "format": "text", "output": "`+strings.Repeat("W", 4000)+`"}`)
	before := submitPreview(p, "before", jsonPreview) // rendered by the server
	plainBefore := submitPreview(p, "plain-before", "")

	b := newBrowser(t)
	b.open(p.url)
	after := submitPreview(p, "after", jsonPreview) // rendered by the script
	plainAfter := submitPreview(p, "plain-after", "")
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after)+" .preview")), chromedp.WaitVisible(chromedp.CSS(row(plainAfter))))

	for _, id := range []string{before, after} {
		b.do(chromedp.WaitVisible(chromedp.CSS(row(id) + " .preview-output")))
		b.g.Expect(b.text(row(id) + " .preview h4")).To(ContainSubstring(previewLabel))
		b.g.Expect(b.text(row(id) + " .preview-output")).To(Equal(shownJSONPreview))
		b.g.Expect(b.text(row(id) + " .preview-digest")).To(Equal(previewDigest))
		b.g.Expect(b.text(row(id) + " .preview-image")).To(Equal(previewImage))
		b.g.Expect(b.text(row(id) + " .preview-image-id")).To(Equal(previewImageID))
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .preview-failed').hidden`))).To(BeTrue())
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .preview-cut').hidden`))).To(BeTrue())
		// The preview is a section of its own after the arguments: it cannot pass for them.
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`(() => { const a = document.querySelector('`+row(id)+` .arguments');
			const v = document.querySelector('`+row(id)+` .preview');
			return !a.contains(v) && !v.contains(a) && !!(a.compareDocumentPosition(v) & Node.DOCUMENT_POSITION_FOLLOWING); })()`))).To(BeTrue())
	}
	for _, id := range []string{plainBefore, plainAfter} {
		b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` .preview').hidden`))).To(BeTrue(), "no preview")
	}
	// A 4000-byte line wraps inside its box: the page does not get wider than the window.
	b.g.Expect(b.text(row(longLine) + " .preview-output")).To(Equal(strings.Repeat("W", 4000)))
	b.g.Expect(browserRun(b, chromedp.Evaluate[bool](
		`document.documentElement.scrollWidth <= document.documentElement.clientWidth`))).To(BeTrue(), "no horizontal scrolling")
	b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`(() => { const o = document.querySelector('`+row(longLine)+` .preview-output');
		return o.scrollWidth <= o.clientWidth; })()`))).To(BeTrue(), "the line wraps")

	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("script:not([src])").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Title())).To(Equal("Toolgate approvals"), "the output's script did not run")
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}

func TestApprovalPageShowsAFailedPreviewInBrowser(t *testing.T) {
	p := startPage(t)
	before := submitPreview(p, "before", failedPreview)

	b := newBrowser(t)
	b.open(p.url)
	after := submitPreview(p, "after", failedPreview)
	b.do(chromedp.WaitVisible(chromedp.CSS(row(after) + " .preview-failed")))

	for _, id := range []string{before, after} {
		b.do(chromedp.WaitVisible(chromedp.CSS(row(id) + " .preview-failed")))
		b.g.Expect(b.text(row(id) + " .preview h4")).To(ContainSubstring(previewLabel))
		b.g.Expect(b.text(row(id) + " .preview-failed")).To(Equal(
			"The preview failed: " + shownFailure + "; the tool could not say what this call would do."))
		b.g.Expect(b.text(row(id) + " .preview-image")).To(Equal(previewImage))
		for _, hidden := range []string{".preview-output", ".preview-digest", ".preview-digest-label", ".preview-image-id", ".preview-format"} {
			b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`document.querySelector('`+row(id)+` `+hidden+`').hidden`))).To(BeTrue(), hidden)
		}
	}
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("b").length`))).To(BeZero())
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
