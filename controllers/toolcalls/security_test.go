package toolcalls_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

// secret returns a distinctive random credential: upper-case letters, which neither UIDs, hashes,
// timestamps nor Go identifiers in a log produce by chance.
func secret(t *testing.T) string {
	b := make([]byte, 32)
	_, err := rand.Read(b)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for i := range b {
		b[i] = 'A' + b[i]%26
	}
	return string(b)
}

// echoProxy stands between the controller and the reference provider on a loopback socket. It
// forwards every call, except those it is told to answer itself, as a misbehaving provider or
// gateway might: with bodies that quote the credential the call presented.
type echoProxy struct {
	URL  string
	cred string

	mu      sync.Mutex
	answers map[faults.Op][]func(auth string) (int, string)
	echoed  map[faults.Op]int
}

func startEchoProxy(t *testing.T, target, cred string) *echoProxy {
	t.Helper()
	g := NewWithT(t)
	u, err := url.Parse(target)
	g.Expect(err).NotTo(HaveOccurred())
	p := &echoProxy{cred: cred, answers: map[faults.Op][]func(string) (int, string){}, echoed: map[faults.Op]int{}}
	forward := httputil.NewSingleHostReverseProxy(u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if answer := p.take(operation(r), auth); answer != nil {
			status, body := answer(auth)
			w.Header().Set("Content-Type", provider.ContentTypeJSON)
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
			return
		}
		forward.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.URL = "http://" + ln.Addr().String()
	return p
}

func operation(r *http.Request) faults.Op {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/requests":
		return faults.OpSubmit
	case r.Method == http.MethodDelete && strings.HasPrefix(r.URL.Path, "/v1/requests/"):
		return faults.OpCancel
	default:
		return faults.OpGet
	}
}

// answer makes the proxy answer the next n calls of op that present the real credential itself.
func (p *echoProxy) answer(op faults.Op, n int, f func(auth string) (int, string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for range n {
		p.answers[op] = append(p.answers[op], f)
	}
}

func (p *echoProxy) take(op faults.Op, auth string) func(string) (int, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if auth != "Bearer "+p.cred || len(p.answers[op]) == 0 {
		return nil
	}
	f := p.answers[op][0]
	p.answers[op] = p.answers[op][1:]
	p.echoed[op]++
	return f
}

func (p *echoProxy) count(op faults.Op) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.echoed[op]
}

// errorResponse is an AAP ErrorResponse body.
func errorResponse(status int, code, message string) (int, string) {
	b, _ := json.Marshal(provider.ErrorResponse{Error: provider.ErrorBody{
		Type: provider.TypeForStatus(status), Code: code, Message: message, RequestID: "1184dfc5-0e86-4f88-9b68-882b1dc60467"}})
	return status, string(b)
}

// The provider credential never reaches the manager's log (at debug level), the namespace's events,
// or the ToolCalls (status and annotations), through a 401 and a credential fix, approval, the Job,
// a cancel on deletion, and provider answers that quote the credential back.
func TestCredentialNeverAppearsInLogsEventsOrStatus(t *testing.T) {
	cred, wrong := secret(t), secret(t)
	h := th.New(t, env, th.WithoutManager(), th.WithProvider(func(o *reference.Options) { o.Credential = cred }))
	g := h.G
	ctx := context.Background()
	g.Expect(os.ReadFile(h.CredFile)).To(ContainSubstring(cred), "the harness hands the manager the provider's credential")
	proxy := startEchoProxy(t, h.URL, cred)
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)

	// The Secret holds a wrong credential when the manager starts: the provider answers 401.
	g.Expect(os.WriteFile(h.CredFile, []byte(wrong+"\n"), 0o600)).To(Succeed())
	p := h.StartProcess("--provider-url", proxy.URL, "--zap-log-level", "debug")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	g.Eventually(func() int64 { return h.Provider.Stats().Responses[faults.OpSubmit][http.StatusUnauthorized] }).
		WithTimeout(60*time.Second).Should(BeNumerically(">=", 1), p.Log)
	pending := h.WaitPhase("refund", tg.PhasePending)
	g.Expect(pending.Status.Reason).To(Equal(tg.ReasonSubmitFailed))
	g.Expect(pending.Status.Message).To(ContainSubstring(provider.CodeUnauthenticated))

	// Once the Secret is fixed, the provider (or a gateway in front of it) quotes the credential in
	// refusals of the submission and in failed polls.
	proxy.answer(faults.OpSubmit, 2, func(auth string) (int, string) {
		return errorResponse(http.StatusForbidden, "token_refused:"+auth, "the gateway refused "+auth+" for this tenant")
	})
	proxy.answer(faults.OpGet, 2, func(auth string) (int, string) {
		return errorResponse(http.StatusBadGateway, "upstream:"+auth, "upstream refused Authorization: "+auth)
	})
	g.Expect(os.WriteFile(h.CredFile, []byte(cred+"\n"), 0o600)).To(Succeed())
	req := h.PendingRequest("refund")
	g.Expect(proxy.count(faults.OpSubmit)).To(Equal(2))
	g.Eventually(func() int { return proxy.count(faults.OpGet) }).WithTimeout(30 * time.Second).Should(Equal(2))
	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.FinishJob(running.Status.JobName, true, `{"refund_id":"re_1"}`)
	h.WaitPhase("refund", tg.PhaseSucceeded)

	// A success answer that quotes the credential where the request's id and status belong.
	proxy.answer(faults.OpSubmit, 1, func(auth string) (int, string) {
		b, _ := json.Marshal(map[string]any{"id": auth, "status": cred, "tool": "issue_refund"})
		return http.StatusCreated, string(b)
	})
	h.ToolCall("untrusted", "issue_refund", th.RefundArgs, 3*time.Minute, nil)
	untrusted := h.WaitPhase("untrusted", tg.PhaseApprovalUnavailable)
	g.Expect(untrusted.Status.Reason).To(Equal(tg.ReasonUntrustedProviderResponse))
	g.Expect(untrusted.Status.Message).To(ContainSubstring("[redacted]"), "the answer did quote the credential")

	// A refusal that quotes it in its detail ends up in the status message.
	proxy.answer(faults.OpSubmit, 1, func(auth string) (int, string) {
		return errorResponse(http.StatusBadRequest, provider.CodeInvalidRequest, "credential "+cred+" may not submit this tool")
	})
	h.ToolCall("refused", "issue_refund", th.RefundArgs, 3*time.Minute, nil)
	refused := h.WaitPhase("refused", tg.PhaseRejected)
	g.Expect(refused.Status.Reason).To(Equal(tg.ReasonProviderRefused))
	g.Expect(refused.Status.Message).To(ContainSubstring("[redacted]"))

	// A failed cancel (DELETE) that quotes it: the deleted ToolCall's request is cancelled on the retry.
	h.ToolCall("withdrawn", "issue_refund", th.RefundArgs, 3*time.Minute, nil)
	withdrawn := h.PendingRequest("withdrawn")
	proxy.answer(faults.OpCancel, 1, func(auth string) (int, string) {
		return errorResponse(http.StatusBadGateway, "upstream:"+auth, "upstream refused Authorization: "+auth)
	})
	g.Expect(h.K8s.Delete(ctx, h.Get("withdrawn"))).To(Succeed())
	h.WaitGone("withdrawn", 30*time.Second)
	g.Expect(proxy.count(faults.OpCancel)).To(Equal(1))
	g.Expect(h.Provider.Get(withdrawn.ID)).To(HaveField("Status", provider.StatusCancelled))

	var eventsJSON []byte
	g.Eventually(func(g Gomega) {
		list := &eventsv1.EventList{}
		g.Expect(h.K8s.List(ctx, list, client.InNamespace(h.NS))).To(Succeed())
		reasons := []string{}
		for _, e := range list.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ContainElements(tg.ReasonSubmitFailed, tg.ReasonJobSucceeded, tg.ReasonUntrustedProviderResponse, tg.ReasonProviderRefused, tg.ReasonCancelRequested))
		core := &corev1.EventList{}
		g.Expect(h.K8s.List(ctx, core, client.InNamespace(h.NS))).To(Succeed())
		a, err := json.Marshal(list)
		g.Expect(err).NotTo(HaveOccurred())
		b, err := json.Marshal(core)
		g.Expect(err).NotTo(HaveOccurred())
		eventsJSON = append(a, b...)
	}).WithTimeout(30 * time.Second).Should(Succeed())
	calls := &tg.ToolCallList{}
	g.Expect(h.K8s.List(ctx, calls, client.InNamespace(h.NS))).To(Succeed())
	g.Expect(calls.Items).To(HaveLen(3))
	callsJSON, err := json.Marshal(calls)
	g.Expect(err).NotTo(HaveOccurred())

	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	metrics, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(metrics)).To(ContainSubstring(`toolgate_provider_request_errors_total{code="unavailable",op="wait",provider="default"}`),
		"an error code AAP's table does not give that status (a 502's) is counted by its status, never as a label of its own")
	g.Expect(string(metrics)).To(ContainSubstring(`toolgate_provider_request_errors_total{code="forbidden",op="submit",provider="default"}`))
	g.Expect(string(metrics)).To(ContainSubstring(`toolgate_provider_request_errors_total{code="unavailable",op="cancel",provider="default"}`))

	log := p.Log()
	g.Expect(log).To(ContainSubstring(`"level":"debug"`), "the manager logged at debug level")
	g.Expect(log).To(ContainSubstring("[redacted]"), "the quoted credential reached the log, redacted")
	for where, text := range map[string]string{"manager log": log, "metrics": string(metrics), "events": string(eventsJSON), "ToolCalls": string(callsJSON)} {
		for _, s := range []string{cred, cred[:8], wrong, wrong[:8]} {
			g.Expect(linesWith(text, s)).To(BeEmpty(), "%s holds (part of) a credential", where)
		}
	}
}

// linesWith returns the lines of text that contain s.
func linesWith(text, s string) []string {
	var found []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, s) {
			found = append(found, line)
		}
	}
	return found
}

// caFile writes a CA's PEM to a file, as a mounted --provider-ca-file.
func caFile(t *testing.T, ca *testcert.CA) string {
	path := filepath.Join(t.TempDir(), "ca.pem")
	NewWithT(t).Expect(os.WriteFile(path, ca.PEM, 0o600)).To(Succeed())
	return path
}

// Over TLS, with the provider's CA as --provider-ca-file, the whole flow runs.
func TestProviderOverTLSWithItsCA(t *testing.T) {
	ca := testcert.NewCA(t, "approvals provider CA")
	h := th.New(t, env, th.WithProviderTLS(ca.ServerCert(t)), th.WithProviderClient(func(o *provider.Options) { o.CAFile = caFile(t, ca) }))
	g := h.G
	g.Expect(h.URL).To(HavePrefix("https://"))
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.Approve(h.PendingRequest("refund").ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.FinishJob(running.Status.JobName, true, "ok")
	h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(h.Provider.Stats().Creates).To(BeEquivalentTo(1))
}

// A provider whose certificate another CA signed is never trusted: nothing reaches it, the call
// does not run, and the status and events say that the certificate could not be verified.
func TestProviderCertificateFromAnotherCAIsRefusedVisibly(t *testing.T) {
	ca, other := testcert.NewCA(t, "approvals provider CA"), testcert.NewCA(t, "some other CA")
	// The controller's clock stands still until the test moves it past the approval limit, so that
	// attempts that first end in a timeout on a loaded machine (the TLS handshake is slow there) leave
	// room for the certificate's verdict.
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := th.New(t, env, th.WithClock(clk), th.WithProviderTLS(ca.ServerCert(t)), th.WithProviderClient(func(o *provider.Options) { o.CAFile = caFile(t, other) }))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	// approval limit = 14s - 5s exec - 1s return = 8s after creation.
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 14*time.Second, nil)
	const problem = "x509: certificate signed by unknown authority"

	g.Eventually(func(g Gomega) {
		pending := h.Get("refund")
		g.Expect(pending.Status.Phase).To(Equal(tg.PhasePending))
		g.Expect(pending.Status.Reason).To(Equal(tg.ReasonSubmitFailed))
		g.Expect(pending.Status.Message).To(And(ContainSubstring(problem), ContainSubstring("--provider-ca-file")))
	}).WithTimeout(time.Minute).Should(Succeed())
	clk.SetTime(clk.Now().Add(time.Minute)) // past the limit, however late the ToolCall was created
	u := h.WaitPhase("refund", tg.PhaseApprovalUnavailable, time.Minute)
	g.Expect(u.Status.Reason).To(Equal(tg.ReasonWaitingLimitReached))
	g.Expect(u.Status.Message).To(And(ContainSubstring(problem), ContainSubstring("The call did not run.")))
	g.Eventually(func(g Gomega) []string {
		list := &eventsv1.EventList{}
		g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
		var notes []string
		for _, e := range list.Items {
			notes = append(notes, e.Reason+": "+e.Note)
		}
		return notes
	}).Should(ContainElements(
		// The SubmitFailed event is emitted once, with the first attempt's cause, which on a loaded
		// machine can be the handshake's timeout; the status above and the final event carry the
		// certificate's verdict.
		HavePrefix(tg.ReasonSubmitFailed+": The approval request could not be submitted yet"),
		And(HavePrefix(tg.ReasonWaitingLimitReached+": "), ContainSubstring(problem))))
	st := h.Provider.Stats()
	g.Expect(st.Submits).To(BeZero(), "no call got past the TLS handshake")
	g.Expect(h.Jobs()).To(BeEmpty())
}
