package reference_test

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

// submitAs submits a refund through Toolgate's provider client with requester set.
func (e *env) submitAs(key, requester string) *provider.Request {
	e.t.Helper()
	credFile := filepath.Join(e.t.TempDir(), "credential")
	e.g.Expect(os.WriteFile(credFile, []byte(credential), 0o600)).To(Succeed())
	c, err := provider.NewHTTPClient(provider.Options{BaseURL: e.url, CredentialFile: credFile, RequestTimeout: 5 * time.Second})
	e.g.Expect(err).NotTo(HaveOccurred())
	req, err := c.Submit(context.Background(), provider.Submission{
		IdempotencyKey: key, Tool: "issue_refund", Arguments: json.RawMessage(`{"amount":4900}`),
		Timeout: 30 * time.Minute, Requester: requester,
	})
	e.g.Expect(err).NotTo(HaveOccurred())
	return req
}

// The requester travels in the optional Toolgate-Requester header, never in the body, and the
// reference provider records it with the request.
func TestSubmissionRecordsTheRequesterHeader(t *testing.T) {
	e := start(t)
	for _, who := range []string{
		"system:serviceaccount:payments:refund-agent",
		"José Müller <ops@example.com>",
		"line\r\nbreak%41",
	} {
		req := e.submitAs("key-"+url.PathEscape(who), who)
		e.g.Expect(req.Requester).To(Equal(who), "echoed in the full profile")
		got, err := e.srv.Get(req.ID)
		e.g.Expect(err).NotTo(HaveOccurred())
		e.g.Expect(got.Requester).To(Equal(who), "recorded as sent, whatever its characters")
	}

	// Without the header the request has no requester, and nothing else changes.
	req := e.submitAs("key-anonymous", "")
	e.g.Expect(req.Requester).To(BeEmpty())

	// A replay with another requester is the same request, as recorded first.
	again := e.submitAs("key-"+url.PathEscape("system:serviceaccount:payments:refund-agent"), "someone-else")
	e.g.Expect(again.Requester).To(Equal("system:serviceaccount:payments:refund-agent"))
}

func TestRequesterHeaderIsPrintableASCII(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{
		"system:serviceaccount:payments:refund-agent": "system:serviceaccount:payments:refund-agent",
		"José":      "Jos%C3%A9",
		"a\r\nb":    "a%0D%0Ab",
		"100%":      "100%25",
		"tab\there": "tab%09here",
	} {
		got := provider.EncodeHeaderValue(in)
		g.Expect(got).To(Equal(want))
		back, err := url.PathUnescape(got)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(back).To(Equal(in))
	}
}

// A provider written from the seed alone knows no such header: the seed profile ignores it and
// answers with the seed's fields only.
func TestSeedProfileIgnoresTheRequester(t *testing.T) {
	e := start(t, seedProfile)
	req := e.submitAs("key-seed", "system:serviceaccount:payments:refund-agent")
	e.g.Expect(req.Requester).To(BeEmpty())
	got, err := e.srv.Get(req.ID)
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(got.Requester).To(BeEmpty())
}
