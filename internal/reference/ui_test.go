package reference_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
)

// pageEnv is a reference provider with a separate admin credential, and a client that does not follow
// redirects, for the approval page.
type pageEnv struct {
	*env
	noRedirect *http.Client
}

func startPage(t *testing.T, options ...func(*reference.Options)) *pageEnv {
	t.Helper()
	e := start(t, options...)
	noRedirect := newClient()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &pageEnv{env: e, noRedirect: noRedirect}
}

// pageRequest builds a request to the page: no Authorization header, the cookie if any, and the headers
// a browser sends for a same-origin fetch.
func (p *pageEnv) pageRequest(method, path string, cookie *http.Cookie, body any) *http.Request {
	p.t.Helper()
	req := p.newRequest(method, path, body)
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if method == http.MethodPost {
		req.Header.Set("Origin", p.url)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		req.Header.Set("Content-Type", provider.ContentTypeJSON)
	}
	return req
}

// send sends a request without following redirects and reads the whole response.
func (p *pageEnv) send(req *http.Request) response {
	p.t.Helper()
	resp, err := p.noRedirect.Do(req)
	p.g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	p.g.Expect(err).NotTo(HaveOccurred())
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

// signIn posts the sign-in form with token, as a browser on the page does, and returns the response.
func (p *pageEnv) signIn(token string) response {
	p.t.Helper()
	req := p.pageRequest(http.MethodPost, "/ui/sign-in", nil, []byte(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return p.send(req)
}

// session signs in with the admin credential and returns the session cookie.
func (p *pageEnv) session() *http.Cookie {
	p.t.Helper()
	r := p.signIn(adminCredential)
	p.g.Expect(r.status).To(Equal(http.StatusSeeOther), string(r.body))
	cookies, err := http.ParseSetCookie(r.header.Get("Set-Cookie"))
	p.g.Expect(err).NotTo(HaveOccurred())
	return &http.Cookie{Name: cookies.Name, Value: cookies.Value}
}

func (p *pageEnv) decide(cookie *http.Cookie, id, action string, body any) response {
	p.t.Helper()
	return p.send(p.pageRequest(http.MethodPost, "/ui/api/requests/"+id+"/"+action, cookie, body))
}

func TestApprovalPageSignIn(t *testing.T) {
	p := startPage(t)
	p.create("key-1")

	noSession := p.send(p.pageRequest(http.MethodGet, "/ui/", nil, nil))
	p.g.Expect(noSession.status).To(Equal(http.StatusOK), "the sign-in form")
	p.g.Expect(noSession.header.Values("Set-Cookie")).To(BeEmpty())
	p.g.Expect(noSession.header.Get("Content-Type")).To(HavePrefix("text/html"))
	p.g.Expect(string(noSession.body)).To(ContainSubstring(`<form method="post" action="/ui/sign-in">`))
	p.g.Expect(string(noSession.body)).To(ContainSubstring(`<input type="password" name="token"`))
	p.g.Expect(noSession.header.Get("Content-Security-Policy")).To(ContainSubstring("form-action 'self'"))
	p.g.Expect(string(noSession.body)).NotTo(ContainSubstring("issue_refund"))

	for _, token := range []string{"", "wrong", adminCredential + "x", credential, provisioner} {
		r := p.signIn(token)
		p.g.Expect(r.status).To(Equal(http.StatusUnauthorized), "token %q", token)
		p.g.Expect(r.header.Values("Set-Cookie")).To(BeEmpty(), "token %q", token)
		p.g.Expect(string(r.body)).To(ContainSubstring("not the admin credential or an approver&#39;s credential"), "token %q", token)
	}

	// A credential in the address is refused, even the right one: it would stay in the history and logs.
	inAddress := p.send(p.pageRequest(http.MethodGet, "/ui/?token="+adminCredential, nil, nil))
	p.g.Expect(inAddress.status).To(Equal(http.StatusUnauthorized))
	p.g.Expect(inAddress.header.Values("Set-Cookie")).To(BeEmpty())
	p.g.Expect(string(inAddress.body)).To(ContainSubstring("A credential in the address is refused"))

	// The form posts from the page itself: a cross-site post (login forgery) and a JSON body are refused.
	crossSite := p.pageRequest(http.MethodPost, "/ui/sign-in", nil, []byte(url.Values{"token": {adminCredential}}.Encode()))
	crossSite.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	crossSite.Header.Set("Sec-Fetch-Site", "cross-site")
	crossSite.Header.Set("Origin", "http://evil.example")
	forgery := p.send(crossSite)
	p.g.Expect(forgery.status).To(Equal(http.StatusForbidden))
	p.g.Expect(forgery.header.Values("Set-Cookie")).To(BeEmpty())
	asJSON := p.send(p.pageRequest(http.MethodPost, "/ui/sign-in", nil, map[string]string{"token": adminCredential}))
	p.g.Expect(asJSON.status).To(Equal(http.StatusBadRequest))
	p.g.Expect(asJSON.header.Values("Set-Cookie")).To(BeEmpty())

	r := p.signIn(adminCredential)
	p.g.Expect(r.status).To(Equal(http.StatusSeeOther))
	p.g.Expect(r.header.Get("Location")).To(Equal("/ui/"))
	set, err := http.ParseSetCookie(r.header.Get("Set-Cookie"))
	p.g.Expect(err).NotTo(HaveOccurred())
	p.g.Expect(set.HttpOnly).To(BeTrue())
	p.g.Expect(set.SameSite).To(Equal(http.SameSiteStrictMode))
	p.g.Expect(set.Path).To(Equal("/ui/"))
	p.g.Expect(set.MaxAge).To(Equal(12 * 3600))
	p.g.Expect(set.Secure).To(BeFalse(), "plain HTTP")
	p.g.Expect(set.Value).NotTo(ContainSubstring(adminCredential))
	cookie := &http.Cookie{Name: set.Name, Value: set.Value}

	page := p.send(p.pageRequest(http.MethodGet, "/ui/", cookie, nil))
	p.g.Expect(page.status).To(Equal(http.StatusOK))
	p.g.Expect(page.header.Get("Content-Type")).To(Equal("text/html; charset=utf-8"))
	p.g.Expect(page.header.Get("Content-Security-Policy")).To(ContainSubstring("script-src 'self'"))
	p.g.Expect(page.header.Get("Cache-Control")).To(Equal("no-store"))
	p.g.Expect(string(page.body)).To(ContainSubstring(`<h3 class="tool">issue_refund</h3>`))
	p.g.Expect(string(page.body)).To(ContainSubstring(`<dd class="key">key-1</dd>`))
	p.g.Expect(string(page.body)).To(ContainSubstring(`<span class="time-left" title="time left until the deadline">30m 00s</span>`))

	// Time left follows the server's clock.
	p.clock.Step(29*time.Minute + 30*time.Second)
	page = p.send(p.pageRequest(http.MethodGet, "/ui/", cookie, nil))
	p.g.Expect(string(page.body)).To(ContainSubstring(`title="time left until the deadline">30s</span>`))

	static := p.send(p.pageRequest(http.MethodGet, "/ui/static/app.js", cookie, nil))
	p.g.Expect(static.status).To(Equal(http.StatusOK))
	p.g.Expect(static.header.Get("Content-Type")).To(Equal("text/javascript; charset=utf-8"))
	p.g.Expect(string(static.body)).To(ContainSubstring("new EventSource"))
	p.g.Expect(p.send(p.pageRequest(http.MethodGet, "/ui/static/page.html", cookie, nil)).status).To(Equal(http.StatusNotFound))

	// Everything but the sign-in needs the cookie; a bearer credential is not a session.
	forged := &http.Cookie{Name: set.Name, Value: set.Value[:strings.Index(set.Value, ".")] + ".forged"}
	later := &http.Cookie{Name: set.Name, Value: "99999999999" + set.Value[strings.Index(set.Value, "."):]}
	for _, path := range []string{"/ui/", "/ui/events", "/ui/static/app.js"} {
		for _, c := range []*http.Cookie{nil, forged, later} {
			req := p.pageRequest(http.MethodGet, path, c, nil)
			req.Header.Set("Authorization", "Bearer "+adminCredential)
			got := p.send(req)
			p.g.Expect(string(got.body)).NotTo(ContainSubstring("issue_refund"), "%s with cookie %v", path, c)
			if path == "/ui/" {
				p.g.Expect(string(got.body)).To(ContainSubstring(`action="/ui/sign-in"`), "%s with cookie %v", path, c)
				continue
			}
			p.g.Expect(got.status).To(Equal(http.StatusUnauthorized), "%s with cookie %v", path, c)
		}
	}

	redirect := p.send(p.pageRequest(http.MethodGet, "/ui?x=1", nil, nil))
	p.g.Expect(redirect.status).To(Equal(http.StatusMovedPermanently))
	p.g.Expect(redirect.header.Get("Location")).To(Equal("/ui/?x=1"))

	// The session ends after 12 hours.
	p.clock.Step(12 * time.Hour)
	p.g.Expect(string(p.send(p.pageRequest(http.MethodGet, "/ui/", cookie, nil)).body)).To(ContainSubstring(`action="/ui/sign-in"`))
	p.g.Expect(p.send(p.pageRequest(http.MethodGet, "/ui/events", cookie, nil)).status).To(Equal(http.StatusUnauthorized))
}

// The page is an admin surface and accepts exactly the credentials the admin API accepts: the admin
// credential, never the instance credential, whether the admin credential is given or drawn at random.
func TestApprovalPageAcceptsTheAdminAPICredential(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given string
	}{
		{name: "drawn at random"},
		{name: "given", given: adminCredential},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPage(t, func(o *reference.Options) { o.AdminCredential = tc.given })
			accepted := p.srv.AdminCredential()
			p.g.Expect(accepted).NotTo(BeEmpty())
			if tc.given != "" {
				p.g.Expect(accepted).To(Equal(tc.given))
			}
			adminList := func(token string) int {
				return p.do(p.requestAs(token, http.MethodGet, "/admin/v1/requests", nil)).status
			}
			p.g.Expect(p.signIn(accepted).status).To(Equal(http.StatusSeeOther))
			p.g.Expect(adminList(accepted)).To(Equal(http.StatusOK))
			for _, refused := range []string{credential, provisioner, "wrong"} {
				p.g.Expect(p.signIn(refused).status).To(Equal(http.StatusUnauthorized), refused)
				p.g.Expect(adminList(refused)).To(Equal(http.StatusUnauthorized), refused)
			}
		})
	}
}

func TestApprovalPageRefusesCrossOriginActions(t *testing.T) {
	p := startPage(t)
	id := p.create("key-1").ID
	cookie := p.session()
	approve := map[string]any{"valid_for_minutes": 10}

	for _, tc := range []struct {
		name   string
		header map[string]string
	}{
		{name: "Origin of another site", header: map[string]string{"Origin": "http://evil.example", "Sec-Fetch-Site": ""}},
		{name: "Origin of another port", header: map[string]string{"Origin": "http://127.0.0.1:1", "Sec-Fetch-Site": ""}},
		{name: "cross-site fetch", header: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		{name: "same-site fetch from another origin", header: map[string]string{"Sec-Fetch-Site": "same-site"}},
	} {
		req := p.pageRequest(http.MethodPost, "/ui/api/requests/"+id+"/approve", cookie, approve)
		for k, v := range tc.header {
			req.Header.Set(k, v)
			if v == "" {
				req.Header.Del(k)
			}
		}
		refusal := p.expectError(p.send(req), http.StatusForbidden, provider.CodeForbidden)
		p.g.Expect(refusal.Message).To(ContainSubstring("cross-origin request refused"), tc.name)
	}

	noSession := p.decide(nil, id, "approve", approve)
	p.expectError(noSession, http.StatusUnauthorized, provider.CodeUnauthenticated)
	bearer := p.pageRequest(http.MethodPost, "/ui/api/requests/"+id+"/approve", nil, approve)
	bearer.Header.Set("Authorization", "Bearer "+adminCredential)
	p.expectError(p.send(bearer), http.StatusUnauthorized, provider.CodeUnauthenticated)

	form := p.pageRequest(http.MethodPost, "/ui/api/requests/"+id+"/approve", cookie, []byte("valid_for_minutes=10"))
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	formRefused := p.expectError(p.send(form), http.StatusBadRequest, provider.CodeInvalidRequest)
	p.g.Expect(formRefused.Message).To(ContainSubstring("the body must be JSON"))

	p.g.Expect(p.srv.Get(id)).To(HaveField("Status", provider.StatusPending))

	approved := p.expectAdmin(p.decide(cookie, id, "approve", approve), http.StatusOK)
	p.g.Expect(approved.Status).To(Equal(provider.StatusApproved))
	p.g.Expect(p.srv.Get(id)).To(Equal(approved.Request))
}

func TestApprovalPageValidatesDecisions(t *testing.T) {
	p := startPage(t)
	id := p.create("key-1").ID
	cookie := p.session()

	for _, tc := range []struct {
		action, body, detail string
	}{
		{"approve", `{}`, "valid_for_minutes is required: give a whole number of minutes from 1 to 1440"},
		{"approve", `{"valid_for_minutes":null}`, "valid_for_minutes is required"},
		{"approve", `{"valid_for_minutes":0}`, "valid_for_minutes must be a whole number of minutes from 1 to 1440, not 0"},
		{"approve", `{"valid_for_minutes":-5}`, "valid_for_minutes must be a whole number of minutes from 1 to 1440, not -5"},
		{"approve", `{"valid_for_minutes":1441}`, "valid_for_minutes must be a whole number of minutes from 1 to 1440, not 1441"},
		{"approve", `{"valid_for_minutes":1.5}`, "valid_for_minutes must be a whole number"},
		{"approve", `{"valid_for_minutes":"15"}`, "valid_for_minutes must be a whole number"},
		{"approve", `{"valid_for_minutes":5,"note":"` + strings.Repeat("é", 1001) + `"}`, "note has 1001 characters; shorten it to at most 1000"},
		{"deny", `{}`, "note is required to deny"},
		{"deny", `{"note":" \n "}`, "note is required to deny"},
		{"deny", `{"note":"` + strings.Repeat("x", 1001) + `"}`, "note has 1001 characters"},
		{"deny", `not json`, "the body is not valid"},
		{"deny", `{"note":5}`, "the body is not valid"},
	} {
		r := p.decide(cookie, id, tc.action, []byte(tc.body))
		refusal := p.expectError(r, http.StatusBadRequest, provider.CodeInvalidRequest)
		p.g.Expect(refusal.Message).To(ContainSubstring(tc.detail), "%s %s", tc.action, tc.body)
	}
	p.g.Expect(p.srv.Get(id)).To(HaveField("Status", provider.StatusPending))

	p.expectError(p.decide(cookie, "no-such-id", "approve", []byte(`{"valid_for_minutes":5}`)), http.StatusNotFound, provider.CodeNotFound)

	approved := p.expectAdmin(p.decide(cookie, id, "approve", []byte(`{"valid_for_minutes":1440,"note":" ok "}`)), http.StatusOK)
	p.g.Expect(approved.Decision.Status).To(Equal(provider.StatusApproved))
	p.g.Expect(approved.Decision.Note).To(Equal("ok (approved by admin)"), "trimmed, and who decided")
	p.g.Expect(*approved.Decision.DecidedAt).To(BeTemporally("==", t0))
	p.g.Expect(*approved.Decision.ExpiresAt).To(BeTemporally("==", t0.Add(24*time.Hour)), "the upper bound is allowed")

	conflict := p.expectError(p.decide(cookie, id, "deny", []byte(`{"note":"too late"}`)), http.StatusConflict, provider.CodeAlreadyTerminal)
	p.g.Expect(conflict.Message).To(ContainSubstring("already approved"))

	other := p.create("key-2").ID
	denied := p.expectAdmin(p.decide(cookie, other, "deny", []byte(`{"note":"Not a duplicate charge."}`)), http.StatusOK)
	p.g.Expect(denied.Decision.Status).To(Equal(provider.StatusDenied))
	p.g.Expect(denied.Decision.Note).To(Equal("Not a duplicate charge. (denied by admin)"))
	p.g.Expect(denied.Decision.ExpiresAt).To(BeNil())
}

func TestApprovalPageValidityFollowsDefaultApprovalValidity(t *testing.T) {
	p := startPage(t, func(o *reference.Options) { o.DefaultApprovalValidity = 36 * time.Hour })
	id := p.create("key-1").ID
	cookie := p.session()

	page := p.send(p.pageRequest(http.MethodGet, "/ui/", cookie, nil))
	p.g.Expect(string(page.body)).To(ContainSubstring(`max="2160" step="1" value="2160"`))
	refusal := p.expectError(p.decide(cookie, id, "approve", []byte(`{"valid_for_minutes":2161}`)), http.StatusBadRequest, provider.CodeInvalidRequest)
	p.g.Expect(refusal.Message).To(ContainSubstring("from 1 to 2160"))
	approved := p.expectAdmin(p.decide(cookie, id, "approve", []byte(`{"valid_for_minutes":2160}`)), http.StatusOK)
	p.g.Expect(*approved.Decision.ExpiresAt).To(BeTemporally("==", t0.Add(36*time.Hour)))
}

// sseEvent is one event of the page's event stream.
type sseEvent struct {
	name string
	data string
}

// snapshotEvent is the data of a "snapshot" event.
type snapshotEvent struct {
	Now     time.Time `json:"now"`
	Pending []struct {
		ID             string        `json:"id"`
		Tool           string        `json:"tool"`
		Arguments      string        `json:"arguments"`
		AgentReasoning string        `json:"agent_reasoning"`
		Context        string        `json:"context"`
		Preview        *shownPreview `json:"preview"`
		InstanceName   string        `json:"instance_name"`
		IdempotencyKey string        `json:"idempotency_key"`
	} `json:"pending"`
	Recent []struct {
		ID     string `json:"id"`
		Status string `json:"status"`
		Note   string `json:"note"`
	} `json:"recent"`
}

// readEvents sends the events of an event stream to the returned channel, which is closed at the end
// of the stream.
func readEvents(body io.Reader) <-chan sseEvent {
	events := make(chan sseEvent, 16)
	go func() {
		defer close(events)
		scanner := bufio.NewScanner(body)
		scanner.Buffer(nil, 1<<20)
		var ev sseEvent
		for scanner.Scan() {
			line := scanner.Text()
			switch {
			case line == "":
				if ev.name != "" || ev.data != "" {
					events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return events
}

// stream opens the page's event stream; the test closes it.
func (p *pageEnv) stream(cookie *http.Cookie) <-chan sseEvent {
	p.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p.t.Cleanup(cancel)
	resp, err := (&http.Client{}).Do(p.pageRequest(http.MethodGet, "/ui/events", cookie, nil).WithContext(ctx))
	p.g.Expect(err).NotTo(HaveOccurred())
	p.t.Cleanup(func() { _ = resp.Body.Close() })
	p.g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
	p.g.Expect(resp.Header.Get("Content-Type")).To(Equal("text/event-stream"))
	return readEvents(resp.Body)
}

// next waits for the next event of a stream, which must be a snapshot.
func (p *pageEnv) next(events <-chan sseEvent) snapshotEvent {
	p.t.Helper()
	var ev sseEvent
	p.g.Eventually(events).Should(Receive(&ev))
	p.g.Expect(ev.name).To(Equal("snapshot"))
	var snap snapshotEvent
	p.g.Expect(json.Unmarshal([]byte(ev.data), &snap)).To(Succeed())
	return snap
}

// snapshot reads the first snapshot of a new event stream.
func (p *pageEnv) snapshot(cookie *http.Cookie) snapshotEvent {
	p.t.Helper()
	return p.next(p.stream(cookie))
}

func pendingIDs(s snapshotEvent) []string {
	var ids []string
	for _, r := range s.Pending {
		ids = append(ids, r.ID)
	}
	return ids
}

func TestApprovalPageEventStream(t *testing.T) {
	p := startPage(t)
	first := p.create("key-1").ID
	cookie := p.session()
	events := p.stream(cookie)

	snap := p.next(events)
	p.g.Expect(snap.Now).To(BeTemporally("==", t0))
	p.g.Expect(pendingIDs(snap)).To(Equal([]string{first}))
	p.g.Expect(snap.Pending[0].Tool).To(Equal("issue_refund"))
	p.g.Expect(snap.Pending[0].IdempotencyKey).To(Equal("key-1"))
	p.g.Expect(snap.Pending[0].Arguments).To(Equal("{\n  \"payment_id\": \"payment_123\",\n  \"amount\": 4900,\n  \"currency\": \"GBP\"\n}"))

	second := p.create("key-2").ID
	p.g.Expect(pendingIDs(p.next(events))).To(Equal([]string{second, first}), "a new request is sent, newest first")

	_, err := p.srv.Decide(first, provider.StatusApproved, "confirmed", nil)
	p.g.Expect(err).NotTo(HaveOccurred())
	snap = p.next(events)
	p.g.Expect(pendingIDs(snap)).To(Equal([]string{second}), "a decision made elsewhere is sent")
	p.g.Expect(snap.Recent).To(HaveLen(1))
	p.g.Expect(snap.Recent[0].ID).To(Equal(first))
	p.g.Expect(snap.Recent[0].Status).To(Equal(provider.StatusApproved))
	p.g.Expect(snap.Recent[0].Note).To(Equal("confirmed"))

	p.clock.Step(30 * time.Minute)
	snap = p.next(events)
	p.g.Expect(snap.Pending).To(BeEmpty(), "an expiry is sent")
	p.g.Expect(snap.Recent[0].ID).To(Equal(second))
	p.g.Expect(snap.Recent[0].Status).To(Equal(provider.StatusExpired))

	// The stream ends with the session, and the browser's reconnection is refused.
	p.clock.Step(12*time.Hour - 30*time.Minute - time.Second)
	p.g.Consistently(events).WithTimeout(200 * time.Millisecond).ShouldNot(BeClosed())
	p.clock.Step(time.Second)
	p.g.Eventually(events).Should(BeClosed())
	p.expectError(p.send(p.pageRequest(http.MethodGet, "/ui/events", cookie, nil)), http.StatusUnauthorized, provider.CodeUnauthenticated)
}

func TestApprovalPageEventStreamEndsWhenServerCloses(t *testing.T) {
	p := startPage(t)
	events := p.stream(p.session())
	p.g.Expect(pendingIDs(p.next(events))).To(BeEmpty())

	// Close does not wait for the browser to go away (it would give up after 5 seconds).
	closed := make(chan error, 1)
	go func() { closed <- p.srv.Close() }()
	p.g.Eventually(closed).WithTimeout(4 * time.Second).Should(Receive(BeNil()))
	p.g.Eventually(events).Should(BeClosed())
}

func TestApprovalPageArgumentsText(t *testing.T) {
	cases := []struct {
		name, arguments, text string
	}{
		{"order, numbers and nesting as submitted",
			`{"b": 1.50, "a": [1, {"c": null, "d": true}], "e": {}, "f": [], "g": -2e3}`,
			"{\n  \"b\": 1.50,\n  \"a\": [\n    1,\n    {\n      \"c\": null,\n      \"d\": true\n    }\n  ],\n  \"e\": {},\n  \"f\": [],\n  \"g\": -2e3\n}"},
		{"HTML characters as they are", `{"x": "\u003cb\u003e \u0026 <i>"}`, `{` + "\n" + `  "x": "<b> & <i>"` + "\n}"},
		{"quotes, backslashes and whitespace escapes", `{"x": "say \"hi\" \\ a\nb\tc\rd"}`, `{` + "\n" + `  "x": "say \"hi\" \\ a\nb\tc\rd"` + "\n}"},
		{"letters of any script", `{"x": "héllo 日本 🙂"}`, "{\n  \"x\": \"héllo 日本 🙂\"\n}"},
		{"bidirectional override, escaped or not", `{"x": "abc\u202edef", "y": "abc` + "\u202e" + `def"}`,
			`{` + "\n" + `  "x": "abc\u202edef",` + "\n" + `  "y": "abc\u202edef"` + "\n}"},
		{"invisible characters", `{"x": "a\u200bb\u00a0c\u0007d` + "\U000E0041" + `"}`, `{` + "\n" + `  "x": "a\u200bb\u00a0c\u0007d\udb40\udc41"` + "\n}"},
	}
	p := startPage(t)
	ids := map[string]string{}
	for i, tc := range cases {
		body := []byte(`{"tool": "t", "timeout": "30m", "arguments": ` + tc.arguments + `}`)
		ids[tc.name] = p.expectRequest(p.submit(fmt.Sprint("key-", i), body), http.StatusCreated).ID
	}
	texts := map[string]string{}
	for _, r := range p.snapshot(p.session()).Pending {
		texts[r.ID] = r.Arguments
	}
	for _, tc := range cases {
		p.g.Expect(texts[ids[tc.name]]).To(Equal(tc.text), tc.name)
	}
}

// ---------------------------------------------------------------------------------------------------
// In a browser

const (
	// stepTimeout bounds one group of browser actions, so that a missing element fails the test instead
	// of hanging it; it is generous because the whole suite may be loading the machine.
	stepTimeout     = 45 * time.Second
	chromiumPath    = "/usr/bin/chromium"
	chromiumInstall = "install Debian's Chromium with hack/install-test-deps.sh " +
		"(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)"
)

// browser is a headless Chromium tab.
type browser struct {
	t   *testing.T
	g   *WithT
	ctx context.Context

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// newBrowser starts Chromium with a fresh profile; the test ends it. Without Chromium the test is
// skipped, or fails when the CI environment variable is set.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := fmt.Sprintf("%s is missing (%v): %s", chromiumPath, err, chromiumInstall)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	g := NewWithT(t)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc() // waits for the browser to exit, before its profile directory is removed
	})
	b := &browser{t: t, g: g, ctx: ctx}
	g.Expect(chromedp.Do(ctx)).To(Succeed(), "starting %s", chromiumPath)
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	return b
}

// do runs actions, bounded by stepTimeout.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	b.g.Expect(chromedp.Do(ctx, actions...)).To(Succeed())
}

func browserRun[T any](b *browser, action chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	b.g.Expect(err).NotTo(HaveOccurred())
	return v
}

func (b *browser) text(selector string) string {
	b.t.Helper()
	return browserRun(b, chromedp.TextContent(chromedp.CSS(selector)))
}

// problems returns the exceptions and errors the page logged.
func (b *browser) problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.Type == chromedp.ConsoleException || m.Type == chromedp.ConsoleError {
			out = append(out, string(m.Type)+": "+m.Text)
		}
	}
	return out
}

// open signs the browser in and waits until the page follows the event stream.
func (b *browser) open(base string) { b.t.Helper(); b.openAs(base, adminCredential) }

// openAs signs the browser in with credential through the sign-in form and waits until the page
// follows the event stream.
func (b *browser) openAs(base, credential string) {
	b.t.Helper()
	b.do(
		chromedp.Navigate(base+"/ui/"),
		chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), credential),
		chromedp.Submit(chromedp.CSS(`input[name="token"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#connection[data-state="live"]`)),
	)
	b.g.Expect(browserRun(b, chromedp.Location())).To(Equal(base+"/ui/"), "no credential in the address")
}

func row(id string) string { return fmt.Sprintf(`article.request[data-id=%q]`, id) }

// submitThrough submits a request over plain HTTP, as an adapter does, and returns it.
func submitThrough(p *pageEnv, key, tool, arguments string) provider.Request {
	p.t.Helper()
	body := provider.CreateApprovalRequest{Tool: tool, Arguments: json.RawMessage(arguments), Timeout: "30m"}
	return p.expectRequest(p.submit(key, body), http.StatusCreated)
}

func TestApprovalPageInBrowser(t *testing.T) {
	p := startPage(t)
	refundReq := submitThrough(p, "toolcall-uid-refund", "issue_refund",
		`{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}`)
	emailReq := submitThrough(p, "toolcall-uid-email", "send_email",
		`{"to": "customer@example.com", "subject": "Your refund"}`)

	b := newBrowser(t)
	b.open(p.url)

	// Both requests, with tool, identity, arguments and time left.
	b.do(chromedp.WaitVisible(chromedp.CSS(row(refundReq.ID))), chromedp.WaitVisible(chromedp.CSS(row(emailReq.ID))))
	b.g.Expect(b.text(row(refundReq.ID) + " .tool")).To(Equal("issue_refund"))
	b.g.Expect(b.text(row(refundReq.ID) + " .key")).To(Equal("toolcall-uid-refund"))
	b.g.Expect(b.text(row(refundReq.ID) + " .arguments")).To(Equal(
		"{\n  \"payment_id\": \"payment_123\",\n  \"amount\": 4900,\n  \"currency\": \"GBP\"\n}"))
	b.g.Expect(b.text(row(refundReq.ID) + " .deadline")).To(Equal("2026-09-16T12:30:00Z"))
	b.g.Expect(b.text(row(refundReq.ID) + " .time-left")).To(MatchRegexp(`^(30m 00s|29m [0-5]\ds)$`))
	b.g.Expect(b.text(row(emailReq.ID) + " .tool")).To(Equal("send_email"))
	b.g.Expect(b.text(row(emailReq.ID) + " .arguments")).To(Equal(
		"{\n  \"to\": \"customer@example.com\",\n  \"subject\": \"Your refund\"\n}"))
	b.g.Expect(browserRun(b, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#pending article.request")].map(a => a.dataset.id)`))).
		To(Equal([]string{emailReq.ID, refundReq.ID}), "newest first")

	// Approve one for 15 minutes.
	b.do(
		chromedp.Clear(chromedp.CSS(row(refundReq.ID)+" .validity")),
		chromedp.SendKeys(chromedp.CSS(row(refundReq.ID)+" .validity"), "15"),
		chromedp.Click(chromedp.CSS(row(refundReq.ID)+" button.approve")),
		chromedp.WaitNotPresent(chromedp.CSS(row(refundReq.ID))),
	)
	approved, err := p.srv.Get(refundReq.ID)
	b.g.Expect(err).NotTo(HaveOccurred())
	b.g.Expect(approved.Status).To(Equal(provider.StatusApproved))
	b.g.Expect(*approved.Decision.DecidedAt).To(BeTemporally("==", t0))
	b.g.Expect(*approved.Decision.ExpiresAt).To(BeTemporally("==", t0.Add(15*time.Minute)))

	// Deny the other with a note; without one the page says why it cannot.
	b.do(
		chromedp.Click(chromedp.CSS(row(emailReq.ID)+" button.deny")),
		chromedp.WaitVisible(chromedp.CSS(row(emailReq.ID)+" .error")),
	)
	b.g.Expect(b.text(row(emailReq.ID) + " .error")).To(ContainSubstring("note is required to deny"))
	b.g.Expect(p.srv.Get(emailReq.ID)).To(HaveField("Status", provider.StatusPending))
	b.do(
		chromedp.SendKeys(chromedp.CSS(row(emailReq.ID)+" .note"), "Not a duplicate charge."),
		chromedp.Click(chromedp.CSS(row(emailReq.ID)+" button.deny")),
		chromedp.WaitNotPresent(chromedp.CSS(row(emailReq.ID))),
	)
	denied, err := p.srv.Get(emailReq.ID)
	b.g.Expect(err).NotTo(HaveOccurred())
	b.g.Expect(denied.Status).To(Equal(provider.StatusDenied))
	b.g.Expect(denied.Decision.Note).To(Equal("Not a duplicate charge. (denied by admin)"))
	b.g.Expect(denied.Decision.ExpiresAt).To(BeNil())

	// Both show in the recent list.
	b.do(chromedp.WaitVisible(chromedp.CSS(`#recent-rows tr[data-id="` + emailReq.ID + `"]`)))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + refundReq.ID + `"] .status`)).To(Equal("approved"))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + refundReq.ID + `"] .expires`)).To(Equal("2026-09-16T12:15:00Z"))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + emailReq.ID + `"] .status`)).To(Equal("denied"))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + emailReq.ID + `"] .note`)).To(Equal("Not a duplicate charge. (denied by admin)"))
	b.g.Expect(b.text("#pending-empty")).To(ContainSubstring("No request is waiting"))

	// A request submitted while the page is open appears without a reload, and leaves when cancelled.
	b.do(chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))
	third := submitThrough(p, "toolcall-uid-third", "delete_branch", `{"branch": "feature/x"}`)
	b.do(chromedp.WaitVisible(chromedp.CSS(row(third.ID))))
	b.g.Expect(b.text(row(third.ID) + " .tool")).To(Equal("delete_branch"))
	b.g.Expect(b.text(row(third.ID) + " .arguments")).To(Equal("{\n  \"branch\": \"feature/x\"\n}"))
	b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`window.notReloaded === true`))).To(BeTrue(), "the page did not reload")

	b.g.Expect(p.expectRequest(p.cancel(third.ID), http.StatusOK).Status).To(Equal(provider.StatusCancelled))
	b.do(chromedp.WaitNotPresent(chromedp.CSS(row(third.ID))))
	b.g.Expect(b.text(`#recent-rows tr[data-id="` + third.ID + `"] .status`)).To(Equal("cancelled"))
	b.g.Expect(browserRun(b, chromedp.Evaluate[bool](`window.notReloaded === true`))).To(BeTrue(), "the page did not reload")

	b.g.Expect(b.problems()).To(ConsistOf(ContainSubstring("status of 400")), "only the refused denial without a note")
}

func TestApprovalPageShowsArgumentsAsTextInBrowser(t *testing.T) {
	const arguments = `{"comment": "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"}`
	p := startPage(t)
	// Sent as raw HTTP, so that the stored arguments hold < and > as they are.
	submit := func(key string) string {
		body := []byte(`{"tool": "post_comment", "timeout": "30m", "arguments": ` + arguments + `}`)
		return p.expectRequest(p.submit(key, body), http.StatusCreated).ID
	}
	before := submit("key-before") // rendered by the server

	b := newBrowser(t)
	b.open(p.url)
	after := submit("key-after") // rendered by the script
	b.do(chromedp.WaitVisible(chromedp.CSS(row(before))), chromedp.WaitVisible(chromedp.CSS(row(after))))

	for _, id := range []string{before, after} {
		b.g.Expect(b.text(row(id) + " .arguments")).To(ContainSubstring(`<img src=x onerror=\"document.title='pwned'\">`))
		b.g.Expect(b.text(row(id) + " .arguments")).To(ContainSubstring(`<script>document.title='pwned'</script>`))
	}
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Evaluate[int](`document.querySelectorAll("script:not([src])").length`))).To(BeZero())
	b.g.Expect(browserRun(b, chromedp.Title())).To(Equal("Toolgate approvals"))
	b.g.Expect(b.problems()).To(BeEmpty(), "the page logged no error")
}
