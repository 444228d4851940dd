package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// noDeleteRule is what an agent needs on ToolCalls to call through the gateway: everything the
// agent role has but delete.
var noDeleteRule = rbacv1.PolicyRule{APIGroups: []string{tg.GroupVersion.Group}, Resources: []string{"toolcalls"}, Verbs: []string{"create", "get", "list", "watch"}}

// expectWithdrawn asserts that the ToolCall is deleted, that its approval request is withdrawn at the
// provider (no longer pending for a human), and that no tool ran.
func (w *world) expectWithdrawn(name, requestID string) {
	w.T.Helper()
	w.WaitGone(name, abandonBound)
	w.G.Eventually(func() (string, error) {
		r, err := w.Provider.Get(requestID)
		return r.Status, err
	}).WithTimeout(abandonBound).Should(Equal(w.WithdrawnStatus()), "request %s", requestID)
	w.G.Expect(w.Jobs()).To(BeEmpty())
}

// A caller that may create and follow its ToolCalls but not delete them still has every call it
// abandons withdrawn, whichever way it goes: killed mid-call (the ping fails), ending its session,
// cancelling the request, or the gateway closing. The gateway deletes as itself, with nothing but
// its shipped roles.
func TestAbandonedCallsOfCallersWithoutDeleteAreWithdrawn(t *testing.T) {
	w := newAuthWorldWith(t, Options{WaitingLimit: 10 * time.Minute, PingInterval: 2 * time.Second})
	g := w.G
	w.Tool("issue-refund", "issue_refund", th.RefundSchema)
	token := w.serviceAccount("agent", testAudience, mayCallRule("issue_refund"), noDeleteRule)
	user := "system:serviceaccount:" + w.NS + ":agent"
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + w.NS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: w.NS, Verb: "delete", Group: tg.GroupVersion.Group, Resource: "toolcalls"},
	}}
	g.Expect(w.K8s.Create(context.Background(), sar)).To(Succeed())
	g.Expect(sar.Status.Allowed).To(BeFalse(), "the caller may not delete ToolCalls")

	t.Log("the TypeScript SDK's agent, killed while its call waits")
	a := w.startTSAgent("issue_refund", th.RefundArgs, token)
	name, req := w.awaitPending(a)
	g.Expect(w.Get(name).Spec.Requester.Username).To(Equal(user), "the ToolCall is the caller's")
	g.Expect(a.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	w.expectWithdrawn(name, req)

	t.Log("the TypeScript SDK's agent ends its session while its call waits")
	a = w.startTSAgent("issue_refund", th.RefundArgs, token)
	name, req = w.awaitPending(a)
	a.send(g, "terminate")
	g.Eventually(a.lines).Should(ContainElement("terminated"))
	w.expectWithdrawn(name, req)

	t.Log("the Go SDK's client cancels its request")
	cs := w.connectAs(token)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := w.call(ctx, cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name = w.toolCallName()
	req = w.PendingRequest(name).ID
	cancel()
	g.Expect(w.outcome(done).err).To(MatchError(context.Canceled))
	w.expectWithdrawn(name, req)

	t.Log("the gateway closes while a call waits")
	done = w.call(context.Background(), cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name = w.toolCallName()
	req = w.PendingRequest(name).ID
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelClose()
	g.Expect(w.gw.Close(closeCtx)).To(Succeed())
	w.expectWithdrawn(name, req)
	g.Expect(w.outcome(done).err).To(MatchError(`calling "tools/call": the MCP gateway is shutting down`))
	g.Expect(w.gw.ownedNames()).To(BeEmpty())
}

// tcpProxy forwards connections to the apiserver until it is cut: then it closes the connections it
// carries and refuses new ones, as an apiserver that is down would, until it is restored.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	down  bool
	conns map[net.Conn]struct{}
}

// proxied returns a gateway identity (the admin's) that reaches the apiserver through a tcpProxy.
func proxied(t *testing.T) (*tcpProxy, func(*th.Harness) *rest.Config) {
	t.Helper()
	g := NewWithT(t)
	u, err := url.Parse(env.Config.Host)
	g.Expect(err).NotTo(HaveOccurred())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	p := &tcpProxy{ln: ln, target: u.Host, conns: map[net.Conn]struct{}{}}
	served := make(chan struct{})
	go func() {
		defer close(served)
		p.serve()
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-served
		p.cut()
	})
	return p, func(*th.Harness) *rest.Config {
		cfg := rest.CopyConfig(env.Config)
		cfg.Host = "https://" + ln.Addr().String() // the serving certificate is for 127.0.0.1
		return cfg
	}
}

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		if !down {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if down {
			_ = c.Close()
			continue
		}
		go p.forward(c)
	}
}

func (p *tcpProxy) forward(c net.Conn) {
	defer p.drop(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	if p.down {
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer p.drop(up)
	copied := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); copied <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); copied <- struct{}{} }()
	<-copied
}

func (p *tcpProxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cut closes every connection and refuses new ones until restore.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *tcpProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// logRecorder keeps the messages of the gateway's log lines, at every verbosity.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) logger() logr.Logger {
	return funcr.NewJSON(func(line string) {
		var l struct {
			Msg string `json:"msg"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			panic(fmt.Sprintf("funcr wrote a line that is not JSON: %v: %s", err, line))
		}
		r.mu.Lock()
		r.msgs = append(r.msgs, l.Msg)
		r.mu.Unlock()
	}, funcr.Options{Verbosity: 1})
}

func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// unreachable is a world whose gateway reaches the apiserver through a proxy the test cuts, with a
// fake clock and a backoff of 1 s, 2 s, 4 s... for its retries. The manager reaches the apiserver
// directly.
type unreachable struct {
	*world
	proxy *tcpProxy
	clock *testingclock.FakeClock
	logs  *logRecorder
}

func newUnreachable(t *testing.T, limit time.Duration) *unreachable {
	t.Helper()
	proxy, identity := proxied(t)
	u := &unreachable{proxy: proxy, clock: testingclock.NewFakeClock(time.Now()), logs: &logRecorder{}}
	u.world = newWorldAs(t, Options{
		WaitingLimit: limit,
		Logger:       u.logs.logger(),
		clock:        u.clock,
		backoff:      wait.Backoff{Duration: time.Second, Factor: 2, Steps: 8, Cap: time.Minute},
	}, identity)
	u.Tool("issue-refund", "issue_refund", th.RefundSchema)
	return u
}

// abandonWhileDown starts a call, cuts the gateway off the apiserver, and cancels the call: the
// gateway's first withdrawal fails and its retry waits on the fake clock. It returns the ToolCall
// and its approval request's id.
func (u *unreachable) abandonWhileDown() (*tg.ToolCall, string) {
	u.T.Helper()
	g := u.G
	cs := u.connect(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := u.call(ctx, cs, &mcp.CallToolParams{Name: "issue_refund", Arguments: json.RawMessage(th.RefundArgs)})
	name := u.toolCallName()
	req := u.PendingRequest(name).ID
	tc := u.Get(name)

	u.proxy.cut()
	cancel()
	g.Expect(u.outcome(done).err).To(MatchError(context.Canceled))
	g.Eventually(u.logs.messages).Should(ContainElement(ContainSubstring("retrying until its waiting limit")))
	g.Eventually(u.clock.Waiters).Should(Equal(2), "the retry waits for its backoff and its waiting limit")
	g.Expect(u.gw.ownedNames()).To(ConsistOf(tc.Name))
	g.Expect(u.Get(tc.Name).DeletionTimestamp).To(BeNil(), "the apiserver never saw the deletion")
	return tc, req
}

// A withdrawal that fails because the apiserver cannot be reached is logged and retried with a
// backoff; once the apiserver is back the ToolCall is deleted and its request withdrawn.
func TestAFailedWithdrawalIsRetried(t *testing.T) {
	u := newUnreachable(t, 10*time.Minute)
	g := u.G
	tc, req := u.abandonWhileDown()

	u.clock.Step(time.Second) // the first retry, still cut off
	g.Eventually(u.logs.messages).Should(ContainElement("withdrawing a ToolCall failed again; retrying"))
	g.Eventually(u.clock.Waiters).Should(Equal(2), "the next retry waits for its backoff")
	g.Expect(u.Get(tc.Name).DeletionTimestamp).To(BeNil())

	u.proxy.restore()
	u.clock.Step(2 * time.Second) // the second retry
	u.expectWithdrawn(tc.Name, req)
	g.Eventually(u.gw.ownedNames).Should(BeEmpty())
	g.Expect(u.logs.messages()).To(ContainElement("the ToolCall of a call nobody waits for is withdrawn"))
}

// The gateway deletes only the ToolCall it created: a ToolCall that took the same name while the
// withdrawal waited (another UID) is left alone, and a ToolCall the gateway did not create is
// never deleted.
func TestWithdrawalLeavesAToolCallOfTheSameNameAlone(t *testing.T) {
	u := newUnreachable(t, 10*time.Minute)
	g := u.G
	ctx := context.Background()
	tc, _ := u.abandonWhileDown()

	// Someone deletes the ToolCall and creates another of the same name.
	g.Expect(u.K8s.Delete(ctx, tc)).To(Succeed())
	u.WaitGone(tc.Name, 30*time.Second)
	again := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: u.NS, Name: tc.Name},
		Spec:       tg.ToolCallSpec{Tool: tc.Spec.Tool, Arguments: tc.Spec.Arguments, WaitingLimit: tc.Spec.WaitingLimit},
	}
	g.Expect(u.K8s.Create(ctx, again)).To(Succeed())
	g.Expect(again.UID).NotTo(Equal(tc.UID))

	u.proxy.restore()
	u.clock.Step(time.Second)
	g.Eventually(u.gw.ownedNames).Should(BeEmpty(), "the retry ended")
	g.Expect(u.logs.messages()).To(ContainElement(ContainSubstring("replaced by another of the same name")))
	kept := u.Get(tc.Name)
	g.Expect(kept.UID).To(Equal(again.UID))
	g.Expect(kept.DeletionTimestamp).To(BeNil(), "the other ToolCall is not deleted")

	// A ToolCall the gateway did not create, even named and identified exactly.
	err := u.gw.deleteOwned(ctx, &ownedCall{name: kept.Name, uid: kept.UID})
	g.Expect(errors.Is(err, errNotOwned)).To(BeTrue(), "%v", err)
	g.Expect(u.Get(tc.Name).DeletionTimestamp).To(BeNil())
}

// A withdrawal is retried only until the call's waiting limit: past it the controller ends the call
// itself, and the retry stops.
func TestWithdrawalRetriesStopAtTheWaitingLimit(t *testing.T) {
	u := newUnreachable(t, 3*time.Minute)
	g := u.G
	tc, _ := u.abandonWhileDown()

	u.clock.Step(3 * time.Minute)
	g.Eventually(u.gw.ownedNames).Should(BeEmpty(), "the retry ended")
	g.Expect(u.logs.messages()).To(ContainElement(ContainSubstring("its waiting limit has passed")))
	g.Expect(u.logs.messages()).NotTo(ContainElement("withdrawing a ToolCall failed again; retrying"),
		"no attempt is made past the waiting limit")
	g.Expect(u.clock.Waiters()).To(BeZero(), "no timer is left behind")
	g.Expect(u.Get(tc.Name).DeletionTimestamp).To(BeNil())
}

// Close waits for the withdrawals being retried only as long as its context allows, then stops them
// and reports the ToolCalls left behind; no retry outlives Close.
func TestCloseStopsTheWithdrawalsItCannotWaitFor(t *testing.T) {
	u := newUnreachable(t, 10*time.Minute)
	g := u.G
	tc, _ := u.abandonWhileDown()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := u.gw.Close(ctx)
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
	g.Expect(err).To(MatchError(ContainSubstring(tc.Name)))
	g.Expect(u.gw.ownedNames()).To(BeEmpty(), "the retry returned before Close did")
	g.Expect(u.clock.Waiters()).To(BeZero(), "no timer is left behind")
	g.Expect(u.logs.messages()).To(ContainElement(ContainSubstring("the gateway stopped before it could withdraw a ToolCall")))

	// Nothing retries any more, even once the apiserver is back.
	u.proxy.restore()
	u.clock.Step(time.Hour)
	g.Consistently(func() *metav1.Time { return u.Get(tc.Name).DeletionTimestamp }).WithTimeout(time.Second).Should(BeNil())
}
