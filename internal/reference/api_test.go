package reference_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

func TestSubmitCreatesPendingRequest(t *testing.T) {
	e := start(t)
	r := e.submit("key-1", refund())

	req := e.expectRequest(r, http.StatusCreated)
	e.g.Expect(req.Tool).To(Equal("issue_refund"))
	e.g.Expect(req.Arguments).To(MatchJSON(refund().Arguments))
	e.g.Expect(req.Timeout).To(Equal("30m"))
	e.g.Expect(req.Status).To(Equal(provider.StatusPending))
	e.g.Expect(req.CreatedAt).To(BeTemporally("==", t0))
	e.g.Expect(req.DeadlineAt).To(BeTemporally("==", t0.Add(30*time.Minute)))
	e.g.Expect(req.Decision).To(BeNil())
	e.g.Expect(e.srv.Get(req.ID)).To(Equal(req))
	e.g.Expect(e.stats().Submits).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
}

// A replay with the same parsed fields (whitespace, key order and number spelling aside) is the same
// request, answered 200 in its current state.
func TestSubmitReplaysSameKeyAndFields(t *testing.T) {
	e := start(t)
	body := refund()
	body.AgentReasoning = "The customer was charged twice."
	body.Context = json.RawMessage(`{"namespace": "payments", "toolcall": {"name": "refund-1", "uid": "u-1"}}`)
	first := e.expectRequest(e.submit("key-1", body), http.StatusCreated)
	respelled := []byte(`{ "context": {"toolcall": {"uid": "u-1", "name": "refund-1"}, "namespace": "payments"},
		"timeout": "30m", "agent_reasoning": "The customer was charged twice.", "tool": "issue_refund",
		"arguments": {"currency":"GBP","amount":4900.0,"payment_id":"payment_123"} }`)

	replay := e.expectRequest(e.submit("key-1", respelled), http.StatusOK)
	e.g.Expect(replay).To(Equal(first))
	e.g.Expect(string(replay.Arguments)).To(Equal(string(first.Arguments)), "the arguments as first submitted")

	_, err := e.srv.Decide(first.ID, provider.StatusApproved, "confirmed", nil)
	e.g.Expect(err).NotTo(HaveOccurred())
	current := e.expectRequest(e.submit("key-1", body), http.StatusOK)
	e.g.Expect(current.ID).To(Equal(first.ID))
	e.g.Expect(current.Status).To(Equal(provider.StatusApproved), "a replay returns the current state")

	e.g.Expect(e.srv.List("")).To(HaveLen(1))
	s := e.stats()
	e.g.Expect(s.Creates).To(BeEquivalentTo(1))
	e.g.Expect(s.Replays).To(BeEquivalentTo(2))
	e.g.Expect(s.Responses[faults.OpSubmit]).To(Equal(map[int]int64{201: 1, 200: 2}))
}

func TestSubmitRefusesReusedKeyWithOtherFields(t *testing.T) {
	for name, change := range map[string]func(*provider.CreateApprovalRequest){
		"tool": func(b *provider.CreateApprovalRequest) { b.Tool = "issue_voucher" },
		"arguments": func(b *provider.CreateApprovalRequest) {
			b.Arguments = json.RawMessage(`{"payment_id":"payment_123","amount":4901,"currency":"GBP"}`)
		},
		"timeout":              func(b *provider.CreateApprovalRequest) { b.Timeout = "31m" },
		"timeout spelled else": func(b *provider.CreateApprovalRequest) { b.Timeout = "1800s" },
		"agent_reasoning":      func(b *provider.CreateApprovalRequest) { b.AgentReasoning = "another story" },
		"context":              func(b *provider.CreateApprovalRequest) { b.Context = json.RawMessage(`{"namespace":"other"}`) },
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t)
			original := e.create("key-1")
			body := refund()
			change(&body)
			e.expectError(e.submit("key-1", body), http.StatusConflict, provider.CodeIdempotencyConflict)
			e.g.Expect(e.srv.Get(original.ID)).To(Equal(original), "the original request is unchanged")
			e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
		})
	}
}

func TestSubmitValidation(t *testing.T) {
	withBody := func(change func(map[string]any)) []byte {
		b := map[string]any{"tool": "issue_refund", "arguments": map[string]any{"amount": 1}, "timeout": "30m"}
		change(b)
		data, _ := json.Marshal(b)
		return data
	}
	set := func(field string, value any) []byte { return withBody(func(b map[string]any) { b[field] = value }) }
	drop := func(field string) []byte { return withBody(func(b map[string]any) { delete(b, field) }) }
	cases := []struct {
		name, key string
		body      []byte
		param     string // "" for none
		message   string // a part of the message
	}{
		{"missing key", "", set("tool", "t"), "Idempotency-Key", "the Idempotency-Key header is required"},
		{"key too long", strings.Repeat("k", 256), set("tool", "t"), "Idempotency-Key", "longer than 255 bytes"},
		{"empty body", "k", []byte(``), "", "the body is empty"},
		{"malformed JSON", "k", []byte(`{"tool":`), "tool", "not valid JSON"},
		{"trailing data", "k", []byte(`{"tool":"t","arguments":{},"timeout":"1m"} {}`), "", "more after its JSON object"},
		{"an array", "k", []byte(`[]`), "", "must be a CreateApprovalRequest"},
		{"unknown field", "k", set("requester", "alice"), "requester", `unknown field "requester"`},
		{"a field of the response", "k", set("status", "approved"), "status", "unknown field"},
		{"a field twice", "k", []byte(`{"tool":"a","tool":"b","arguments":{},"timeout":"1m"}`), "tool", "appears twice"},
		{"tool missing", "k", drop("tool"), "tool", "tool is required"},
		{"tool empty", "k", set("tool", ""), "tool", "non-empty string"},
		{"tool a number", "k", set("tool", 5), "tool", "non-empty string"},
		{"arguments missing", "k", drop("arguments"), "arguments", "arguments is required"},
		{"arguments null", "k", set("arguments", nil), "arguments", "must be a JSON object"},
		{"arguments array", "k", set("arguments", []int{1}), "arguments", "must be a JSON object"},
		{"arguments string", "k", set("arguments", "{}"), "arguments", "must be a JSON object"},
		{"timeout missing", "k", drop("timeout"), "timeout", "timeout is required"},
		{"timeout a number", "k", set("timeout", 30), "timeout", `such as "30m"`},
		{"timeout unparsable", "k", set("timeout", "soon"), "timeout", `one unit, s, m or h (such as "30m" or "90s"), not "soon"`},
		{"timeout in two units", "k", set("timeout", "1h30m"), "timeout", `not "1h30m"`},
		{"timeout zero", "k", set("timeout", "0s"), "timeout", `not "0s"`},
		{"timeout without a unit", "k", set("timeout", "30"), "timeout", `not "30"`},
		{"timeout in milliseconds", "k", set("timeout", "500ms"), "timeout", `not "500ms"`},
		{"timeout with a leading zero", "k", set("timeout", "01m"), "timeout", `not "01m"`},
		{"timeout above maximum", "k", set("timeout", "25h"), "timeout", "from 1s to 24h"},
		{"timeout overflowing", "k", set("timeout", "99999999999999999999h"), "timeout", "too long"},
		{"agent_reasoning a number", "k", set("agent_reasoning", 1), "agent_reasoning", "must be a string"},
		{"agent_reasoning null", "k", set("agent_reasoning", nil), "agent_reasoning", "must be a string"},
		{"context an array", "k", set("context", []string{"x"}), "context", "must be a JSON object"},
		{"context a string", "k", set("context", "{}"), "context", "must be a JSON object"},
		{"body too large", "k", set("arguments", map[string]string{"blob": strings.Repeat("x", int(provider.MaxRequestBodyBytes))}), "", "larger than"},
	}
	e := start(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sub := *e
			sub.t, sub.g = t, NewWithT(t)
			got := sub.expectError(sub.submit(tc.key, tc.body), http.StatusBadRequest, provider.CodeInvalidRequest)
			sub.g.Expect(got.Param).To(Equal(tc.param))
			sub.g.Expect(got.Message).To(ContainSubstring(tc.message))
		})
	}
	e.g.Expect(e.stats().Creates).To(BeZero())
}

func TestSubmitTimeoutBoundsAreInclusive(t *testing.T) {
	e := start(t)
	for _, timeout := range []string{"1s", "24h", "1440m"} {
		body := refund()
		body.Timeout = timeout
		req := e.expectRequest(e.submit("key-"+timeout, body), http.StatusCreated)
		e.g.Expect(req.Timeout).To(Equal(timeout))
	}
}

// A provider may shorten the window it was asked for, never lengthen it: timeout stays what was asked.
func TestMaxWindowShortensTheDeadline(t *testing.T) {
	e := start(t, func(o *reference.Options) { o.MaxWindow = 10 * time.Minute })
	long := e.create("long")
	e.g.Expect(long.Timeout).To(Equal("30m"))
	e.g.Expect(long.DeadlineAt).To(BeTemporally("==", t0.Add(10*time.Minute)))
	body := refund()
	body.Timeout = "5m"
	short := e.expectRequest(e.submit("short", body), http.StatusCreated)
	e.g.Expect(short.DeadlineAt).To(BeTemporally("==", t0.Add(5*time.Minute)))

	e.clock.Step(10 * time.Minute)
	e.g.Expect(e.expectRequest(e.get(long.ID, ""), http.StatusOK).Status).To(Equal(provider.StatusExpired))
}

func TestAuthentication(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	paths := []struct{ method, path string }{
		{http.MethodPost, "/v1/requests"},
		{http.MethodGet, "/v1/requests/" + id},
		{http.MethodDelete, "/v1/requests/" + id},
		{http.MethodPost, "/v1/instances"},
		{http.MethodGet, "/v1/instances/" + uuid.NewString()},
		{http.MethodGet, "/admin/v1/requests"},
		{http.MethodPost, "/admin/v1/requests/" + id + "/decide"},
		{http.MethodPost, "/admin/v1/faults"},
	}
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "Basic " + credential, "Bearer " + credential + "x", credential} {
		for _, p := range paths {
			req := e.request(p.method, p.path, refund())
			req.Header.Set(provider.HeaderIdempotencyKey, "key-2")
			req.Header.Set("Authorization", auth)
			r := e.do(req)
			e.expectError(r, http.StatusUnauthorized, provider.CodeUnauthenticated)
			e.g.Expect(r.header.Get("WWW-Authenticate")).To(Equal("Bearer"))
		}
	}
	lowercase := e.request(http.MethodGet, "/v1/requests/"+id, nil)
	lowercase.Header.Set("Authorization", "bearer "+credential)
	e.expectRequest(e.do(lowercase), http.StatusOK)

	health := e.request(http.MethodGet, "/healthz", nil)
	health.Header.Del("Authorization")
	e.g.Expect(e.do(health).status).To(Equal(http.StatusOK))

	e.g.Expect(e.srv.Get(id)).To(HaveField("Status", provider.StatusPending))
	e.g.Expect(e.stats().Creates).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Responses[faults.OpSubmit][http.StatusUnauthorized]).To(BeEquivalentTo(7))
}

func TestAdminCredentialIsNeverAnInstanceCredential(t *testing.T) {
	e := start(t)

	e.expectError(e.do(e.request(http.MethodGet, "/admin/v1/requests", nil)), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectError(e.do(e.request(http.MethodPost, "/admin/v1/requests/"+uuid.NewString()+"/decide", map[string]string{"status": "approved"})),
		http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.g.Expect(e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests", nil)).status).To(Equal(http.StatusOK))
	e.expectError(e.do(e.submitRequestAs(adminCredential, "key-1", refund())), http.StatusUnauthorized, provider.CodeUnauthenticated)
	e.expectError(e.do(e.requestAs(provisioner, http.MethodGet, "/admin/v1/requests", nil)), http.StatusUnauthorized, provider.CodeUnauthenticated)

	// A provisioned instance's credential is no admin either.
	res := e.provision("agent", `{"instance_name":"agent"}`, http.StatusCreated)
	e.expectError(e.do(e.requestAs(res.Credential.Token, http.MethodGet, "/admin/v1/requests", nil)), http.StatusUnauthorized, provider.CodeUnauthenticated)
}

func TestNew(t *testing.T) {
	g := NewWithT(t)
	for _, tc := range []struct {
		opts reference.Options
		err  string
	}{
		{reference.Options{}, "a credential is required"},
		{reference.Options{Credential: "c", AdminCredential: "c"}, "the admin credential is the static instance credential"},
		{reference.Options{Credential: "c", MinTimeout: time.Hour, MaxTimeout: time.Minute}, "exceeds MaxTimeout"},
		{reference.Options{Credential: "c", ProvisionerToken: "c"}, "the provisioner token must differ"},
		{reference.Options{Credential: "c", AdminCredential: "a", ProvisionerToken: "a"}, "the provisioner token must differ"},
		{reference.Options{Credential: "c", Retention: 167 * time.Hour}, "at least 168h0m0s"},
		{reference.Options{Credential: "c", MaxWindow: -time.Minute}, "MaxWindow -1m0s is negative"},
		{reference.Options{Credential: "c", Profile: "strict"}, `unknown provider profile "strict"`},
	} {
		_, err := reference.New(tc.opts)
		g.Expect(err).To(MatchError(ContainSubstring(tc.err)), "%+v", tc.opts)
	}

	provisionerOnly, err := reference.New(reference.Options{ProvisionerToken: "p"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(provisionerOnly.Close()).To(Succeed())

	s, err := reference.New(reference.Options{Credential: "c"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.DefaultInstance().Name).To(Equal(reference.DefaultInstanceName))
	g.Expect(uuid.Parse(s.DefaultInstance().ID)).Error().NotTo(HaveOccurred())
	_, err = s.Start("127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.Start("127.0.0.1:0")
	g.Expect(err).To(MatchError(ContainSubstring("already started")))
	g.Expect(s.Close()).To(Succeed())
	g.Expect(s.Close()).To(Succeed())
}

func TestUnknownRequest(t *testing.T) {
	e := start(t)
	e.expectError(e.get(uuid.NewString(), ""), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.get(uuid.NewString(), "?wait=30s"), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.cancel(uuid.NewString()), http.StatusNotFound, provider.CodeNotFound)
	decide := e.adminRequest(http.MethodPost, "/admin/v1/requests/"+uuid.NewString()+"/decide", map[string]string{"status": "approved"})
	e.expectError(e.do(decide), http.StatusNotFound, provider.CodeNotFound)

	// A request id is a UUID: retrieval refuses another id (400, naming it); cancellation, whose
	// contract has no 400, finds no such request.
	malformed := e.expectError(e.get("no-such-id", ""), http.StatusBadRequest, provider.CodeInvalidRequest)
	e.g.Expect(malformed.Param).To(Equal("id"))
	e.g.Expect(malformed.Message).To(ContainSubstring(`"no-such-id" is not one`))
	e.expectError(e.cancel("no-such-id"), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.get(strings.ToUpper(e.create("k").ID), ""), http.StatusNotFound, provider.CodeNotFound)

	_, err := e.srv.Get("no-such-id")
	e.g.Expect(err).To(MatchError(reference.ErrNotFound))
}

// Unknown paths and methods get an ErrorResponse too (with an X-Request-ID, as every response).
func TestUnknownEndpointsAndMethods(t *testing.T) {
	e := start(t)
	e.expectError(e.do(e.request(http.MethodGet, "/v2/requests", nil)), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.do(e.newRequest(http.MethodGet, "/nothing/here", nil)), http.StatusNotFound, provider.CodeNotFound)
	put := e.expectError(e.do(e.request(http.MethodPut, "/v1/requests/"+uuid.NewString(), nil)), http.StatusNotFound, provider.CodeNotFound)
	e.g.Expect(put.Message).To(ContainSubstring("serves GET, DELETE"))
	e.expectError(e.do(e.request(http.MethodGet, "/v1/requests", nil)), http.StatusNotFound, provider.CodeNotFound)
	e.expectError(e.do(e.request(http.MethodPost, "/v1/requests/"+uuid.NewString()+"/cancel", nil)), http.StatusNotFound, provider.CodeNotFound)
}

func TestGetReturnsCurrentRequest(t *testing.T) {
	e := start(t)
	created := e.create("key-1")
	for _, query := range []string{"", "?wait=1s"} {
		e.g.Expect(e.expectRequest(e.get(created.ID, query), http.StatusOK)).To(Equal(created))
	}
	e.g.Expect(e.srv.Get(created.ID)).To(Equal(created), "polls change nothing")
}

func TestGetRejectsInvalidWait(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	for _, query := range []string{"?wait=abc", "?wait=-1s", "?wait=30", "?wait=0s", "?wait=500ms", "?wait=1m30s", "?wait=", "?wait=1s&wait=2s"} {
		got := e.expectError(e.get(id, query), http.StatusBadRequest, provider.CodeInvalidRequest)
		e.g.Expect(got.Param).To(Equal("wait"), query)
	}
}

func TestGetReturnsTerminalRequestAtOnce(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	_, err := e.srv.Decide(id, provider.StatusDenied, "no", nil)
	e.g.Expect(err).NotTo(HaveOccurred())

	begin := time.Now()
	req := e.expectRequest(e.get(id, "?wait=10m"), http.StatusOK) // capped, and not waited on anyway
	e.g.Expect(time.Since(begin)).To(BeNumerically("<", 5*time.Second))
	e.g.Expect(req.Status).To(Equal(provider.StatusDenied))
}

func TestCancelPendingRequest(t *testing.T) {
	e := start(t)
	id := e.create("key-1").ID
	e.clock.Step(time.Minute)

	first := e.expectRequest(e.cancel(id), http.StatusOK)
	e.g.Expect(first.Status).To(Equal(provider.StatusCancelled))
	e.g.Expect(first.Decision).To(Equal(&provider.Decision{Status: provider.StatusCancelled, DecidedAt: ptr(t0.Add(time.Minute))}))

	e.clock.Step(time.Minute)
	e.g.Expect(e.expectRequest(e.cancel(id), http.StatusOK)).To(Equal(first), "cancelling again returns the same")
	e.g.Expect(e.stats().Cancellations).To(BeEquivalentTo(1))
	e.g.Expect(e.stats().Cancels).To(BeEquivalentTo(2))
}

func TestCancelTerminalRequestConflicts(t *testing.T) {
	for name, settle := range map[string]func(e *env, id string){
		"approved": func(e *env, id string) { _, _ = e.srv.Decide(id, provider.StatusApproved, "", nil) },
		"denied":   func(e *env, id string) { _, _ = e.srv.Decide(id, provider.StatusDenied, "", nil) },
		"expired":  func(e *env, _ string) { e.clock.Step(30 * time.Minute) },
	} {
		t.Run(name, func(t *testing.T) {
			e := start(t)
			id := e.create("key-1").ID
			settle(e, id)
			before, err := e.srv.Get(id)
			e.g.Expect(err).NotTo(HaveOccurred())

			got := e.expectError(e.cancel(id), http.StatusConflict, provider.CodeAlreadyTerminal)
			e.g.Expect(got.Message).To(ContainSubstring("already " + name))
			e.g.Expect(e.srv.Get(id)).To(Equal(before), "the outcome is unchanged")
			e.g.Expect(before.Status).To(Equal(name))
		})
	}
}

func TestDecideThroughAdminAPI(t *testing.T) {
	e := start(t)
	decide := func(id string, body any) response {
		return e.do(e.adminRequest(http.MethodPost, "/admin/v1/requests/"+id+"/decide", body))
	}
	admin := func(r response) reference.AdminRequest {
		e.g.Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		var out reference.AdminRequest
		e.g.Expect(json.Unmarshal(r.body, &out)).To(Succeed())
		return out
	}
	past := e.create("expires-at").ID
	e.clock.Step(time.Minute)
	now := t0.Add(time.Minute)

	valid := e.create("valid-for").ID
	req := admin(decide(valid, map[string]string{"status": "approved", "note": "ok", "valid_for": "10m"}))
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{
		Status: provider.StatusApproved, Note: "ok (approved by admin)", DecidedAt: ptr(now), ExpiresAt: ptr(now.Add(10 * time.Minute)),
	}))
	e.g.Expect(req.InstanceName).To(Equal(reference.DefaultInstanceName))
	e.g.Expect(req.IdempotencyKey).To(Equal("valid-for"))
	e.expectError(decide(valid, map[string]string{"status": "denied"}), http.StatusConflict, provider.CodeAlreadyTerminal)

	// An approval that arrives already expired is still later than its decision.
	expiresAt := now.Add(-time.Millisecond)
	req = admin(decide(past, map[string]any{"status": "approved", "valid_for": "10m", "expires_at": expiresAt}))
	e.g.Expect(req.Decision.ExpiresAt).To(Equal(&expiresAt))
	e.g.Expect(*req.Decision.DecidedAt).To(BeTemporally("==", now.Add(-time.Second-time.Millisecond)))

	denied := e.create("denied").ID
	req = admin(decide(denied, map[string]string{"status": "denied", "note": "not a duplicate"}))
	e.g.Expect(req.Decision).To(Equal(&provider.Decision{Status: provider.StatusDenied, Note: "not a duplicate (denied by admin)", DecidedAt: ptr(now)}))

	bad := e.create("bad").ID
	for _, body := range []any{
		map[string]string{"status": "cancelled"},
		map[string]string{"status": "approved", "valid_for": "soon"},
		map[string]string{"status": "approved", "valid_for": "-1m"},
		map[string]string{"status": "approved", "by": "someone"},
		map[string]any{"status": "approved", "expires_at": t0.Add(-time.Hour)},
		"not an object",
	} {
		e.expectError(decide(bad, body), http.StatusBadRequest, provider.CodeInvalidRequest)
	}
	e.g.Expect(e.srv.Get(bad)).To(HaveField("Status", provider.StatusPending))
	_, err := e.srv.Decide(bad, provider.StatusExpired, "", nil)
	e.g.Expect(err).To(MatchError(reference.ErrInvalidDecision))
	_, err = e.srv.Decide(bad, provider.StatusApproved, "", ptr(t0))
	e.g.Expect(err).To(MatchError(ContainSubstring("not later than the request's created_at")))
}

func TestListNewestFirst(t *testing.T) {
	e := start(t)
	first, second, third := e.create("a").ID, e.create("b").ID, e.create("c").ID
	_, err := e.srv.Decide(second, provider.StatusDenied, "", nil)
	e.g.Expect(err).NotTo(HaveOccurred())

	list := func(query string) []string {
		r := e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests"+query, nil))
		e.g.Expect(r.status).To(Equal(http.StatusOK))
		var reqs []reference.AdminRequest
		e.g.Expect(json.Unmarshal(r.body, &reqs)).To(Succeed())
		ids := make([]string, 0, len(reqs))
		for _, req := range reqs {
			e.g.Expect(req.InstanceID).To(Equal(e.srv.DefaultInstance().ID))
			ids = append(ids, req.ID)
		}
		return ids
	}
	e.g.Expect(list("?status=pending")).To(Equal([]string{third, first}))
	e.g.Expect(list("")).To(Equal([]string{third, second, first}))
	e.g.Expect(list("?status=denied")).To(Equal([]string{second}))
	e.g.Expect(list("?instance=" + e.srv.DefaultInstance().ID)).To(HaveLen(3))
	e.g.Expect(list("?instance=" + uuid.NewString())).To(BeEmpty())
	e.expectError(e.do(e.adminRequest(http.MethodGet, "/admin/v1/requests?status=maybe", nil)), http.StatusBadRequest, provider.CodeInvalidRequest)
}

// Keys maps each Idempotency-Key to the one request it created; a replay adds nothing.
func TestKeysMapEachKeyToItsRequest(t *testing.T) {
	e := start(t)
	a := e.create("toolcall-uid-a")
	b := e.create("toolcall-uid-b")
	e.expectRequest(e.submit("toolcall-uid-a", refund()), http.StatusOK)
	keys, err := e.srv.Keys()
	e.g.Expect(err).NotTo(HaveOccurred())
	e.g.Expect(keys).To(Equal(map[string]string{"toolcall-uid-a": a.ID, "toolcall-uid-b": b.ID}))

	// The same audit over the admin API, for the admin only.
	resp := e.do(e.adminRequest(http.MethodGet, "/admin/v1/keys?instance="+e.srv.DefaultInstance().ID, nil))
	e.g.Expect(resp.status).To(Equal(http.StatusOK))
	served := map[string]string{}
	e.g.Expect(json.Unmarshal(resp.body, &served)).To(Succeed())
	e.g.Expect(served).To(Equal(keys))
	other := e.do(e.adminRequest(http.MethodGet, "/admin/v1/keys?instance="+uuid.NewString(), nil))
	e.g.Expect(other.status).To(Equal(http.StatusOK))
	e.g.Expect(string(other.body)).To(MatchJSON(`{}`))
	e.g.Expect(e.do(e.request(http.MethodGet, "/admin/v1/keys", nil)).status).To(Equal(http.StatusUnauthorized), "the instance credential is not the admin's")
}

// Stats count accepted connections, so a client's connection reuse can be measured.
func TestStatsCountConnections(t *testing.T) {
	e := start(t) // its client opens a connection per request
	for _, key := range []string{"k0", "k1", "k2"} {
		e.submit(key, refund())
	}
	e.g.Expect(e.stats().Connections).To(BeEquivalentTo(3))

	e.client = &http.Client{Transport: &http.Transport{}} // keeps its connection alive
	for _, key := range []string{"r0", "r1", "r2"} {
		e.submit(key, refund())
	}
	e.g.Expect(e.stats().Connections).To(BeEquivalentTo(4))
}
