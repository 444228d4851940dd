package toolcall_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/pkg/toolcall"
	th "toolgate.dev/toolgate/test/testharness"
)

// countingClient counts the agent's requests, and lets a test interfere with the watches it opens.
type countingClient struct {
	client.WithWatch
	gets, lists, creates, watches atomic.Int64
	// wrapWatch, if set, replaces the n-th watch (1-based) the client opens.
	wrapWatch func(n int64, w watch.Interface) watch.Interface
}

func (c *countingClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.gets.Add(1)
	return c.WithWatch.Get(ctx, key, obj, opts...)
}

func (c *countingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.lists.Add(1)
	return c.WithWatch.List(ctx, list, opts...)
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.creates.Add(1)
	return c.WithWatch.Create(ctx, obj, opts...)
}

func (c *countingClient) Watch(ctx context.Context, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
	n := c.watches.Add(1)
	w, err := c.WithWatch.Watch(ctx, list, opts...)
	if err != nil || c.wrapWatch == nil {
		return w, err
	}
	return c.wrapWatch(n, w), nil
}

// outcome is what a Call or Wait running in a goroutine returned.
type outcome struct {
	res *toolcall.Result
	err error
}

// phases records the phases Progress reported, in order, without repeats.
type phases struct {
	mu   sync.Mutex
	seen []tg.ToolCallPhase
	objs int
}

func (p *phases) progress(tc *tg.ToolCall) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.objs++
	if n := len(p.seen); n == 0 || p.seen[n-1] != tc.Status.Phase {
		p.seen = append(p.seen, tc.Status.Phase)
	}
}

func (p *phases) get() []tg.ToolCallPhase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]tg.ToolCallPhase(nil), p.seen...)
}

func call(ctx context.Context, c *toolcall.Client, tool string, args any, waitingLimit time.Duration, o toolcall.Options) <-chan outcome {
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Call(ctx, tool, args, waitingLimit, o)
		done <- outcome{res, err}
	}()
	return done
}

func receive(g *WithT, done <-chan outcome) outcome {
	var o outcome
	g.Eventually(done).WithTimeout(30 * time.Second).Should(Receive(&o))
	return o
}

func TestCallApprovedReturnsTheResult(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", th.RefundSchema)
	c := toolcall.New(agent.Bind(h), h.NS)
	var seen phases

	done := call(t.Context(), c, "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{
		Name: "refund", Timeout: time.Minute, Labels: map[string]string{"agent": "billing-bot"}, Progress: seen.progress,
	})
	req := h.PendingRequest("refund")
	g.Expect(req.Arguments).To(MatchJSON(th.RefundArgs))
	g.Expect(req.Timeout).To(Equal("1m"))
	running := h.ApproveAndFinish("refund", true, `{"refund_id":"re_1"}`)

	o := receive(g, done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(o.res.Name).To(Equal("refund"))
	g.Expect(o.res.Output).To(Equal(`{"refund_id":"re_1"}`))
	g.Expect(o.res.JobName).To(Equal(running.Status.JobName))
	g.Expect(o.res.ToolCall.Status.Phase).To(Equal(tg.PhaseSucceeded))
	g.Expect(o.res.ToolCall.Labels).To(HaveKeyWithValue("agent", "billing-bot"))
	g.Expect(o.res.ToolCall.Spec.WaitingLimit.Duration).To(Equal(2 * time.Minute))
	g.Expect(o.res.ToolCall.Spec.Timeout.Duration).To(Equal(time.Minute))
	p := seen.get()
	g.Expect(p[0]).To(BeEmpty(), "the created object is reported first")
	g.Expect(p[len(p)-3:]).To(Equal([]tg.ToolCallPhase{tg.PhaseAwaitingApproval, tg.PhaseRunning, tg.PhaseSucceeded}))
}

func TestCallDeniedCarriesTheNote(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	c := toolcall.New(agent.Bind(h), h.NS)
	args := map[string]any{"payment_id": "payment_123", "amount": 4900, "currency": "GBP"}

	done := call(t.Context(), c, "issue_refund", args, 2*time.Minute, toolcall.Options{})
	var name string
	g.Eventually(func(g Gomega) {
		list := &tg.ToolCallList{}
		g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		name = list.Items[0].Name
	}).Should(Succeed())
	g.Expect(name).To(HavePrefix("issue-refund-"), "a generated name derived from the tool")
	req := h.PendingRequest(name)
	g.Expect(req.Arguments).To(MatchJSON(th.RefundArgs), "a map is sent as JSON")
	_, err := h.Provider.Decide(req.ID, provider.StatusDenied, "Not a duplicate.", nil)
	g.Expect(err).NotTo(HaveOccurred())

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrDenied)).To(BeTrue(), "%v", o.err)
	g.Expect(errors.Is(o.err, toolcall.ErrFailed)).To(BeFalse())
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeTrue())
	g.Expect(e.Phase).To(Equal(tg.PhaseDenied))
	g.Expect(e.Reason).To(Equal(tg.ReasonDenied))
	g.Expect(e.Note).To(Equal("Not a duplicate."))
	g.Expect(e.Name).To(Equal(name))
	g.Expect(e.Error()).To(ContainSubstring("Not a duplicate."))
	g.Expect(o.res.Name).To(Equal(name))
	g.Expect(o.res.ToolCall.Status.Phase).To(Equal(tg.PhaseDenied))
	g.Expect(o.res.JobName).To(BeEmpty())
}

func TestCallFailedJobReturnsItsMessage(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	c := toolcall.New(agent.Bind(h), h.NS)
	done := call(t.Context(), c, "issue_refund", []byte(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund"})
	h.ApproveAndFinish("refund", false, "card network declined the refund")

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrFailed)).To(BeTrue(), "%v", o.err)
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeTrue())
	g.Expect(e.Reason).To(Equal(tg.ReasonJobFailed))
	g.Expect(e.Note).To(Equal("The duplicate charge has been confirmed."), "the approver's note of an approval")
	g.Expect(o.res.Output).To(Equal("card network declined the refund"))
	g.Expect(o.res.JobName).NotTo(BeEmpty())
}

func TestCallCancelledAtTheProviderIsCancelled(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	c := toolcall.New(agent.Bind(h), h.NS)
	done := call(t.Context(), c, "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund"})
	_, err := h.Provider.Cancel(h.PendingRequest("refund").ID)
	g.Expect(err).NotTo(HaveOccurred())

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrCancelled)).To(BeTrue(), "%v", o.err)
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeTrue())
	g.Expect(e.Reason).To(Equal(tg.ReasonProviderCancelled))
}

// Nobody decides: the call ends ApprovalUnavailable (never Denied) and the agent has its answer
// within the waiting limit.
func TestCallWithoutADecisionEndsApprovalUnavailableWithinTheWaitingLimit(t *testing.T) {
	h := th.New(t, env, th.WithPollWait(time.Second))
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	c := toolcall.New(agent.Bind(h), h.NS)
	// Approval limit = 12s - 5s execution - 1s return margin; the default timeout fits in it.
	const waitingLimit = 12 * time.Second
	done := call(t.Context(), c, "issue_refund", json.RawMessage(th.RefundArgs), waitingLimit, toolcall.Options{Name: "refund"})
	h.PendingRequest("refund")

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrApprovalUnavailable)).To(BeTrue(), "%v", o.err)
	g.Expect(errors.Is(o.err, toolcall.ErrDenied)).To(BeFalse())
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeTrue())
	g.Expect(e.Reason).To(BeElementOf(tg.ReasonProviderExpired, tg.ReasonWaitingLimitReached))
	g.Expect(e.Message).To(ContainSubstring("could not be obtained"))
	ready := meta.FindStatusCondition(o.res.ToolCall.Status.Conditions, tg.ConditionReady)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.LastTransitionTime.Time).To(BeTemporally("<=", o.res.ToolCall.CreationTimestamp.Add(waitingLimit)))
}

// An approval that is no longer valid by the controller's clock when the Job is about to be created.
func TestCallWithAnExpiredApprovalIsExpired(t *testing.T) {
	h, clk := th.NewClocked(t, env)
	g := h.G
	c := toolcall.New(agent.Bind(h), h.NS)
	done := call(t.Context(), c, "issue_refund", json.RawMessage(th.RefundArgs), time.Hour, toolcall.Options{Name: "refund", Timeout: 10 * time.Minute})
	req := h.PendingRequest("refund")
	// The controller's clock is 6 minutes ahead when the 5-minute approval arrives.
	clk.SetTime(clk.Now().Add(6 * time.Minute))
	h.Approve(req.ID, 5*time.Minute)

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrExpired)).To(BeTrue(), "%v", o.err)
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeTrue())
	g.Expect(e.Reason).To(Equal(tg.ReasonApprovalExpired))
	g.Expect(h.Jobs()).To(BeEmpty())
}

func TestCallForAnUnknownToolIsRejectedWithTheReason(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	c := toolcall.New(agent.Bind(h), h.NS)
	res, err := c.Call(t.Context(), "no_such_tool", map[string]any{}, 2*time.Minute, toolcall.Options{})
	g.Expect(errors.Is(err, toolcall.ErrRejected)).To(BeTrue(), "%v", err)
	var e *toolcall.Error
	g.Expect(errors.As(err, &e)).To(BeTrue())
	g.Expect(e.Reason).To(Equal(tg.ReasonUnknownTool))
	g.Expect(e.Message).To(ContainSubstring("no Tool in namespace"))
	g.Expect(err.Error()).To(And(ContainSubstring(tg.ReasonUnknownTool), ContainSubstring(res.Name)))
	g.Expect(res.Name).To(HavePrefix("no-such-tool-"))
	g.Expect(h.Provider.Stats().Submits).To(BeZero())
}

// The agent gives up (its context ends): the ToolCall is deleted, so Toolgate cancels the request
// and nobody reviews a call nobody is waiting for.
func TestCancelledContextDeletesTheToolCallAndCancelsTheRequest(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	c := toolcall.New(agent.Bind(h), h.NS)
	ctx, cancel := context.WithCancel(t.Context())
	// The agent gives up once it has seen the call wait for a human.
	awaiting := make(chan struct{})
	var once sync.Once
	progress := func(tc *tg.ToolCall) {
		if tc.Status.Phase == tg.PhaseAwaitingApproval {
			once.Do(func() { close(awaiting) })
		}
	}
	done := call(ctx, c, "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund", Progress: progress})
	req := h.PendingRequest("refund")
	g.Eventually(awaiting).WithTimeout(30 * time.Second).Should(BeClosed())
	cancel()

	o := receive(g, done)
	g.Expect(errors.Is(o.err, context.Canceled)).To(BeTrue(), "%v", o.err)
	var ab *toolcall.AbandonedError
	g.Expect(errors.As(o.err, &ab)).To(BeTrue())
	g.Expect(ab.Deleted).To(BeTrue())
	g.Expect(ab.DeleteErr).NotTo(HaveOccurred())
	g.Expect(ab.Phase).To(Equal(tg.PhaseAwaitingApproval))
	g.Expect(o.res.Name).To(Equal("refund"))
	h.WaitGone("refund", 20*time.Second)
	got, err := h.Provider.Get(req.ID)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Status).To(Equal(provider.StatusCancelled))
}

func TestWaitOnATerminalToolCallReturnsAtOnce(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.ToolCall("unknown", "no_such_tool", `{}`, 2*time.Minute, nil)
	h.WaitPhase("unknown", tg.PhaseRejected)
	cc := &countingClient{WithWatch: agent.Bind(h)}
	var seen phases

	res, err := toolcall.New(cc, h.NS).Wait(t.Context(), "unknown", seen.progress)
	g.Expect(errors.Is(err, toolcall.ErrRejected)).To(BeTrue(), "%v", err)
	g.Expect(res.ToolCall.Status.Reason).To(Equal(tg.ReasonUnknownTool))
	g.Expect(cc.gets.Load()).To(BeEquivalentTo(1))
	g.Expect(cc.watches.Load()).To(BeZero(), "no watch for an outcome already known")
	g.Expect(seen.get()).To(Equal([]tg.ToolCallPhase{tg.PhaseRejected}))
}

func TestWaitFollowsAnExistingToolCall(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 2*time.Minute, nil)
	h.PendingRequest("refund")
	c := toolcall.New(agent.Bind(h), h.NS)
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Wait(t.Context(), "refund", nil)
		done <- outcome{res, err}
	}()
	h.ApproveAndFinish("refund", true, "refunded")
	o := receive(g, done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(o.res.Output).To(Equal("refunded"))

	_, err := c.Wait(t.Context(), "nobody", nil)
	g.Expect(err).To(MatchError(And(ContainSubstring(`no ToolCall "nobody"`), ContainSubstring(h.NS))))
}

func TestNonObjectArgumentsAreRefusedBeforeAnythingIsCreated(t *testing.T) {
	h := th.New(t, env, th.WithoutManager())
	g := h.G
	cc := &countingClient{WithWatch: agent.Bind(h)}
	c := toolcall.New(cc, h.NS)
	for _, args := range []any{nil, []int{1, 2}, "payment_123", 42, json.RawMessage(`[1]`), []byte(`{"open":`), json.RawMessage(``), map[string]any(nil)} {
		_, err := c.Call(t.Context(), "issue_refund", args, time.Minute, toolcall.Options{})
		g.Expect(err).To(MatchError(ContainSubstring("arguments")), "%#v", args)
	}
	g.Expect(cc.creates.Load()).To(BeZero())
	list := &tg.ToolCallList{}
	g.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty())
}

// The outcome arrives on one watch: during a long wait the client reads nothing by itself.
func TestWaitingWatchesAndNeverPolls(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	cc := &countingClient{WithWatch: agent.Bind(h)}
	c := toolcall.New(cc, h.NS)
	done := call(t.Context(), c, "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund"})
	req := h.PendingRequest("refund")
	// Meanwhile the controller long-polls the provider (2s polls) and writes nothing.
	g.Consistently(func() int64 { return cc.gets.Load() + cc.lists.Load() }).
		WithTimeout(3 * time.Second).WithPolling(100 * time.Millisecond).Should(BeZero())
	h.Approve(req.ID, 5*time.Minute)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	h.FinishJob(running.Status.JobName, true, "ok")

	o := receive(g, done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(cc.gets.Load()).To(BeNumerically("<=", 1))
	g.Expect(cc.lists.Load()).To(BeZero())
	g.Expect(cc.watches.Load()).To(BeNumerically("<=", 2))
}

// closingWatch passes on one event, then closes, as an apiserver or a proxy may end a watch at any time.
type closingWatch struct {
	ch   chan watch.Event
	stop chan struct{}
	once sync.Once
}

func closeAfterOneEvent(inner watch.Interface) watch.Interface {
	w := &closingWatch{ch: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.ch)
		defer inner.Stop()
		select {
		case ev, ok := <-inner.ResultChan():
			if ok {
				select {
				case w.ch <- ev:
				case <-w.stop:
				}
			}
		case <-w.stop:
		}
	}()
	return w
}

func (w *closingWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }
func (w *closingWatch) ResultChan() <-chan watch.Event { return w.ch }

// staticWatch delivers fixed events, then closes.
type staticWatch struct{ ch chan watch.Event }

func newStaticWatch(events ...watch.Event) watch.Interface {
	ch := make(chan watch.Event, len(events))
	for _, e := range events {
		ch <- e
	}
	close(ch)
	return staticWatch{ch}
}

func (w staticWatch) Stop()                          {}
func (w staticWatch) ResultChan() <-chan watch.Event { return w.ch }

func TestAClosedWatchIsReopenedFromTheLastResourceVersion(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	cc := &countingClient{WithWatch: agent.Bind(h)}
	cc.wrapWatch = func(_ int64, w watch.Interface) watch.Interface { return closeAfterOneEvent(w) }
	var seen phases
	done := call(t.Context(), toolcall.New(cc, h.NS), "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute,
		toolcall.Options{Name: "refund", Progress: seen.progress})
	h.ApproveAndFinish("refund", true, "ok")

	o := receive(g, done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(o.res.Output).To(Equal("ok"))
	g.Expect(cc.watches.Load()).To(BeNumerically(">=", 3), "one watch per change")
	g.Expect(cc.gets.Load()).To(BeZero(), "reopening needs no read")
	p := seen.get()
	g.Expect(p[len(p)-3:]).To(Equal([]tg.ToolCallPhase{tg.PhaseAwaitingApproval, tg.PhaseRunning, tg.PhaseSucceeded}), "no change is lost between watches")
}

func TestATooOldResourceVersionIsReadAfresh(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	cc := &countingClient{WithWatch: agent.Bind(h)}
	cc.wrapWatch = func(n int64, w watch.Interface) watch.Interface {
		if n != 1 {
			return w
		}
		w.Stop()
		return newStaticWatch(watch.Event{Type: watch.Error, Object: &metav1.Status{
			Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version: 1 (2)",
		}})
	}
	done := call(t.Context(), toolcall.New(cc, h.NS), "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund"})
	h.ApproveAndFinish("refund", true, "ok")

	o := receive(g, done)
	g.Expect(o.err).NotTo(HaveOccurred())
	g.Expect(cc.gets.Load()).To(BeEquivalentTo(1), "one fresh read after the expired resourceVersion")
	g.Expect(cc.watches.Load()).To(BeNumerically(">=", 2))
}

func TestAToolCallDeletedBySomeoneElseEndsTheWait(t *testing.T) {
	h := th.New(t, env)
	g := h.G
	h.Tool("issue-refund", "issue_refund", "")
	done := call(t.Context(), toolcall.New(agent.Bind(h), h.NS), "issue_refund", json.RawMessage(th.RefundArgs), 2*time.Minute, toolcall.Options{Name: "refund"})
	h.PendingRequest("refund")
	g.Expect(h.K8s.Delete(context.Background(), h.Get("refund"))).To(Succeed())

	o := receive(g, done)
	g.Expect(errors.Is(o.err, toolcall.ErrDeleted)).To(BeTrue(), "%v", o.err)
	g.Expect(o.err.Error()).To(And(ContainSubstring("deleted by someone else"), ContainSubstring("AwaitingApproval")))
	var e *toolcall.Error
	g.Expect(errors.As(o.err, &e)).To(BeFalse(), "not a terminal phase")
	g.Expect(strings.Contains(o.err.Error(), "refund")).To(BeTrue())
}
