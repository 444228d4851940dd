package toolcalls_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	. "github.com/onsi/gomega"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	th "toolgate.dev/toolgate/test/testharness"
)

// asyncEnv is the harness's asynchronous world (th.Async) with the notifications this file sends
// to its receiver.
type asyncEnv struct{ *th.Async }

// startAsync starts the harness's asynchronous world (th.NewAsync).
func startAsync(t *testing.T, opts ...th.Option) *asyncEnv {
	return &asyncEnv{th.NewAsync(t, env, opts...)}
}

// secret is the signing secret of registration reg.
func (e *asyncEnv) secret(reg *tg.WebhookRegistration) string {
	s := &corev1.Secret{}
	e.H.G.Expect(e.H.K8s.Get(context.Background(), types.NamespacedName{Namespace: e.H.NS, Name: reg.SecretName}, s)).To(Succeed())
	return string(s.Data["signingSecret"])
}

// post sends a notification body as message id, signed with secret at ts, to the receiver, and
// returns the HTTP status.
func (e *asyncEnv) post(secret, id string, ts time.Time, body string) int {
	e.H.T.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	e.H.G.Expect(err).NotTo(HaveOccurred())
	sig, err := wh.Sign(id, ts, []byte(body))
	e.H.G.Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequest(http.MethodPost, e.ReceiverURL, bytes.NewReader([]byte(body)))
	e.H.G.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := e.Client.Do(req)
	e.H.G.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode
}

// resolved is a request.resolved body for request of instance, as message id.
func resolved(id, instance, request string) string {
	return `{"id":"` + id + `","type":"request.resolved","instance_id":"` + instance + `","request_id":"` + request + `","created_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
}

// A call of a provider in asynchronous mode waits with no long poll: the provider's decision reaches
// the manager as a notification, which the receiver records on the ToolCall, and the manager reads
// the request once and runs the approved call.
func TestAsynchronousApprovalRunsWithoutPolling(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	g.Consistently(func() int64 { return e.Team.Stats().Waiting }).WithTimeout(2*time.Second).Should(BeZero(), "no long poll")
	gets := e.Team.Stats().Gets

	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Reason).To(Equal(tg.ReasonJobCreated))
	g.Expect(running.Status.Notification).NotTo(BeNil())
	g.Expect(uuid.Parse(running.Status.Notification.ID)).Error().NotTo(HaveOccurred())
	g.Expect(e.Team.Stats().Gets-gets).To(BeEquivalentTo(1), "one read, for the notification")
	g.Expect(e.Team.Stats().Delivered).To(BeEquivalentTo(1))
}

// The receiver queues the call whose notification it records: the manager reads the request at once,
// without waiting for the watch to bring the recorded notification (here the watch never does).
func TestNotifiedCallIsReadWithoutWaitingForTheWatch(t *testing.T) {
	var held atomic.Int64
	e := startAsync(t, withholdingNotifications(&held))
	h, g := e.H, e.H.G
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	gets := e.Team.Stats().Gets

	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).NotTo(BeNil())
	g.Expect(held.Load()).To(BeNumerically(">", 0), "the watch event that recorded the notification was held back")
	g.Expect(e.Team.Stats().Gets-gets).To(BeEquivalentTo(1), "one read, for the notification")
}

// The read a notification wakes records it in its own status write, with the decision: the call runs
// with one ToolCall write, and the provider gets its 2xx only once that write landed.
func TestNotifiedCallIsRecordedWithTheDecision(t *testing.T) {
	release := make(chan struct{})
	var alone, held atomic.Int64
	e := startAsync(t, holdStatusWrites(func(tc *tg.ToolCall) bool {
		if tc.Status.Notification == nil {
			return false
		}
		if tc.Status.Phase == tg.PhaseAwaitingApproval {
			alone.Add(1)
		}
		held.Add(1)
		return true
	}, release))
	h, g := e.H, e.H.G
	e.approveRefund()
	g.Eventually(func() []batchv1.Job { return h.Jobs() }).Should(HaveLen(1), "the Job is created before the write that records the decision")
	g.Eventually(held.Load).Should(BeEquivalentTo(1), "the write that records the decision and the notification is held")
	g.Consistently(func() int64 { return e.Team.Stats().Delivered }).WithTimeout(time.Second).Should(BeZero(), "no 2xx before the record is written")

	close(release)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).NotTo(BeNil())
	g.Eventually(func() int64 { return e.Team.Stats().Delivered }).Should(BeEquivalentTo(1))
	g.Expect(alone.Load()).To(BeZero(), "no status write of the notification alone")
}

// When the read a notification woke does not record it within receiver.RecordWait (here its status write
// hangs; RecordWait, 3 s), the receiver writes the record itself and answers the provider, which
// does not retry.
func TestReceiverRecordsTheNotificationWhenTheReadIsLate(t *testing.T) {
	release := make(chan struct{})
	e := startAsync(t, holdStatusWrites(func(tc *tg.ToolCall) bool { return tc.Status.Phase == tg.PhaseRunning }, release))
	h, g := e.H, e.H.G
	e.approveRefund()
	g.Eventually(func() int64 { return e.Team.Stats().Delivered }).WithTimeout(10*time.Second).Should(BeEquivalentTo(1), "acknowledged while the read's write hangs")
	tc := h.Get("refund")
	g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval), "the read's write is still held")
	g.Expect(tc.Status.Notification).NotTo(BeNil(), "the receiver recorded the notification")

	close(release)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).To(HaveField("ID", tc.Status.Notification.ID))
	g.Expect(h.Jobs()).To(HaveLen(1))
	g.Expect(e.Team.Stats().Delivered).To(BeEquivalentTo(1))
}

// approveRefund creates the call refund, and approves its request at the provider once the call
// awaits approval.
func (e *asyncEnv) approveRefund() {
	e.H.T.Helper()
	e.H.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := e.H.WaitPhase("refund", tg.PhaseAwaitingApproval)
	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	e.H.G.Expect(err).NotTo(HaveOccurred())
}

// withholdingNotifications builds the manager's cache so that its ToolCall informer never hands the
// controllers a change that records a notification; held counts those it kept back.
func withholdingNotifications(held *atomic.Int64) th.Option {
	return func(h *th.Harness) {
		h.NewCache = func(cfg *rest.Config, o cache.Options) (cache.Cache, error) {
			c, err := cache.New(cfg, o)
			return &notificationHolder{Cache: c, held: held}, err
		}
	}
}

type notificationHolder struct {
	cache.Cache
	held *atomic.Int64
}

func (c *notificationHolder) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	i, err := c.Cache.GetInformer(ctx, obj, opts...)
	if _, ok := obj.(*tg.ToolCall); !ok || err != nil {
		return i, err
	}
	return &holdingInformer{Informer: i, held: c.held}, nil
}

type holdingInformer struct {
	cache.Informer
	held *atomic.Int64
}

func (i *holdingInformer) AddEventHandlerWithOptions(hd toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.Informer.AddEventHandlerWithOptions(holdingHandler{ResourceEventHandler: hd, held: i.held}, o)
}

type holdingHandler struct {
	toolscache.ResourceEventHandler
	held *atomic.Int64
}

func (hh holdingHandler) OnUpdate(oldObj, newObj any) {
	was, ok1 := oldObj.(*tg.ToolCall)
	is, ok2 := newObj.(*tg.ToolCall)
	if ok1 && ok2 && is.Status.Notification != nil && (was.Status.Notification == nil || was.Status.Notification.ID != is.Status.Notification.ID) {
		hh.held.Add(1)
		return
	}
	hh.ResourceEventHandler.OnUpdate(oldObj, newObj)
}

// The receiver refuses what it cannot trust, answers a duplicate without acting twice, and drops a
// notification that concerns no waiting call of its instance; none of it changes a ToolCall's
// outcome or runs anything.
func TestReceiverRefusesForgeriesAndActsOncePerNotification(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	reg := e.DeliveryRegistered()
	secret := e.secret(reg)
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	req := waiting.Status.RequestID
	unchanged := func(why string) {
		t.Helper()
		g.Consistently(func(g Gomega) {
			tc := h.Get("refund")
			g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
			g.Expect(tc.Status.Notification).To(BeNil())
		}).WithTimeout(time.Second).Should(Succeed(), why)
	}

	refused := func(outcome string) float64 {
		return th.MetricValue("toolgate_webhook_messages_total", map[string]string{"type": "notification", "outcome": outcome})
	}
	forged, malformed := refused("unauthenticated"), th.MetricValue("toolgate_webhook_messages_total", map[string]string{"type": "unknown", "outcome": "malformed"})
	tooLarge := th.MetricValue("toolgate_webhook_messages_total", map[string]string{"type": "unknown", "outcome": "too_large"})
	big := uuid.NewString()
	g.Expect(e.post(secret, big, time.Now(), `{"id":"`+big+`","pad":"`+strings.Repeat("x", 20<<10)+`"}`)).To(Equal(http.StatusRequestEntityTooLarge))
	unchanged("an oversized message")
	forger := "whsec_HxwdHhobGBkWFxQVEhMQEQ4PDA0KCwgJBgcEBQIDAAE="
	id := uuid.NewString()
	g.Expect(e.post(forger, id, time.Now(), resolved(id, reg.InstanceID, req))).To(Equal(http.StatusUnauthorized))
	unchanged("a forged signature")
	g.Expect(e.post(secret, id, time.Now().Add(-6*time.Minute), resolved(id, reg.InstanceID, req))).To(Equal(http.StatusUnauthorized))
	unchanged("a timestamp over five minutes old")
	g.Expect(e.post(secret, id, time.Now(), resolved(uuid.NewString(), reg.InstanceID, req))).To(Equal(http.StatusBadRequest))
	unchanged("a body id that is not the webhook-id")
	g.Expect(e.post(secret, id, time.Now(), `{"id":"`+id+`","type":"request.resolved"}`)).To(Equal(http.StatusBadRequest))
	unchanged("a malformed notification")
	g.Expect(e.post(secret, id, time.Now(), resolved(id, uuid.NewString(), req))).To(Equal(http.StatusUnauthorized))
	unchanged("an instance without a registration here")
	g.Expect(refused("unauthenticated")-forged).To(BeEquivalentTo(3), "forged, too old, unknown instance: counted")
	g.Expect(th.MetricValue("toolgate_webhook_messages_total", map[string]string{"type": "unknown", "outcome": "malformed"}) - malformed).To(BeEquivalentTo(1))
	g.Expect(th.MetricValue("toolgate_webhook_messages_total", map[string]string{"type": "unknown", "outcome": "too_large"}) - tooLarge).To(BeEquivalentTo(1))
	g.Expect(e.post(secret, id, time.Now(), resolved(id, reg.InstanceID, uuid.NewString()))).To(Equal(http.StatusNoContent))
	unchanged("a request no call waits for is acknowledged and dropped")

	// Another provider object's instance, on the same receiver, notifies about this call's request:
	// its signature is good, but the request is not its instance's, so nothing is recorded.
	h.CredentialSecret("other-provisioner", th.TeamProvisioner, th.Serves("other"))
	other := &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: h.NS},
		Spec: tg.ApprovalProviderSpec{URL: e.URL, AllowInsecureHTTP: true,
			Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "other-provisioner", Key: "token"}},
			Delivery:     &tg.Delivery{ReceiverURL: e.ReceiverURL}},
	}
	g.Expect(h.K8s.Create(context.Background(), other)).To(Succeed())
	var otherReg *tg.WebhookRegistration
	g.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), client.ObjectKeyFromObject(other), other)).To(Succeed())
		g.Expect(other.Status.Delivery).NotTo(BeNil())
		g.Expect(other.Status.Delivery.Active).NotTo(BeNil())
		otherReg = other.Status.Delivery.Active
	}).WithTimeout(40 * time.Second).Should(Succeed())
	g.Expect(otherReg.InstanceID).NotTo(Equal(reg.InstanceID))
	// The receiver finds the registration in the manager's cache, which may show it a moment after
	// this read did: until then the message is refused (401) and a provider sends it again.
	g.Eventually(func() int {
		return e.post(e.secret(otherReg), id, time.Now(), resolved(id, otherReg.InstanceID, req))
	}).Should(Equal(http.StatusNoContent))
	unchanged("another instance's notification")

	// A genuine notification for a request still pending (as a provider might send before its
	// decision shows) is recorded and makes the manager read; the call goes on waiting.
	g.Expect(e.post(secret, id, time.Now(), resolved(id, reg.InstanceID, req))).To(Equal(http.StatusNoContent))
	g.Eventually(func(g Gomega) {
		g.Expect(h.Get("refund").Status.Notification).To(HaveField("ID", id))
	}).Should(Succeed())
	rv := h.Get("refund").ResourceVersion
	g.Expect(e.post(secret, id, time.Now(), resolved(id, reg.InstanceID, req))).To(Equal(http.StatusNoContent))
	g.Expect(h.Get("refund").ResourceVersion).To(Equal(rv), "a duplicate is acknowledged without a write")
	g.Expect(h.Get("refund").Status.Phase).To(Equal(tg.PhaseAwaitingApproval))

	// A notification for a call that was deleted is acknowledged and dropped.
	g.Expect(h.K8s.Delete(context.Background(), h.Get("refund"))).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: "refund"}, &tg.ToolCall{}))
	}).Should(BeTrue())
	late := uuid.NewString()
	g.Expect(e.post(secret, late, time.Now(), resolved(late, reg.InstanceID, req))).To(Equal(http.StatusNoContent))
}

// A notification lost for good (the provider stopped delivering without the manager knowing) is
// covered by the safety read: an hour after its last read the waiting call reads its request.
func TestLostNotificationIsCoveredByTheSafetyRead(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Now())
	e := startAsync(t, th.WithClock(clk))
	h, g := e.H, e.H.G
	reg := e.DeliveryRegistered()
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Hour, ptr.To(2*time.Hour))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)

	// The provider stops delivering behind the manager's back, then the human approves.
	pc, err := provider.NewHTTPClient(provider.Options{BaseURL: e.URL, Credential: func() (string, error) { return th.TeamProvisioner, nil }})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = pc.UpdateInstanceDelivery(context.Background(), reg.InstanceID, uuid.NewString(), provider.DeliveryUpdate{Remove: true})
	g.Expect(err).NotTo(HaveOccurred())
	exp := clk.Now().Add(2 * time.Hour)
	_, err = e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Consistently(func() tg.ToolCallPhase { return h.Get("refund").Status.Phase }).WithTimeout(2*time.Second).
		Should(Equal(tg.PhaseAwaitingApproval), "nothing is polled before the safety read")

	clk.SetTime(clk.Now().Add(time.Hour))
	touch(h, "refund")
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).To(BeNil())
}

// While the receiver is down the provider keeps delivering; once the manager is back the
// notification arrives, and until then the restarted manager polls nothing.
func TestReceiverDownForAWhileGetsTheProvidersRetry(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)

	h.StopManager()
	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func() int64 { return e.Team.Stats().DeliveryFailures }).Should(BeNumerically(">=", 1), "the provider could not deliver")
	gets := e.Team.Stats().Gets
	h.Start()
	running := h.WaitPhase("refund", tg.PhaseRunning, time.Minute)
	g.Expect(running.Status.Notification).NotTo(BeNil())
	g.Expect(e.Team.Stats().Gets-gets).To(BeEquivalentTo(2), "after the restart, the provider object's probe and the read for the notification, and no poll")
}

// Removing spec.delivery stops the provider's delivery and puts the waiting calls back on long polls.
func TestRemovingDeliveryFallsBackToLongPolls(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	waiting := h.WaitPhase("refund", tg.PhaseAwaitingApproval)
	ap := e.Provider(g)
	ap.Spec.Delivery = nil
	g.Expect(h.K8s.Update(context.Background(), ap)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ap := e.Provider(g)
		g.Expect(ap.Status.Delivery).To(BeNil())
		g.Expect(meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)).To(BeNil())
	}).Should(Succeed())
	g.Eventually(func() int64 { return e.Team.Stats().Waiting }).Should(BeEquivalentTo(1), "the call long-polls again")
	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(waiting.Status.RequestID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).To(BeNil())
	g.Expect(e.Team.Stats().Delivered).To(BeZero())
}

// A delivery update that cannot be sent, because no client can be built with the provisioner token,
// says so and what is wrong, rather than quoting a provider error code nobody sent.
func TestDeliveryUpdateThatCannotBeSentSaysWhy(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	ap := e.Provider(g)
	ap.Spec.CABundle = []byte("not a certificate")
	ap.Spec.Delivery.Rotation = "2"
	g.Expect(h.K8s.Update(context.Background(), ap)).To(Succeed())
	g.Eventually(func(g Gomega) {
		ap := e.Provider(g)
		c := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(ap.Generation))
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(tg.ReasonRegistrationFailed))
		g.Expect(c.Message).To(Equal("The registration of " + e.ReceiverURL + " could not be submitted (the provisioner token cannot be used: the CA bundle holds no PEM certificate: give the PEM of the CA that signed the provider's certificate); retried."))
	}).Should(Succeed())
}

// touch changes an annotation of ToolCall name, which reconciles it.
func touch(h *th.Harness, name string) {
	h.T.Helper()
	tc := h.Get(name)
	patch := client.MergeFrom(tc.DeepCopy())
	metav1.SetMetaDataAnnotation(&tc.ObjectMeta, "example.com/touched", time.Now().Format(time.RFC3339Nano))
	h.G.Expect(h.K8s.Patch(context.Background(), tc, patch)).To(Succeed())
}

// A decision can reach the receiver before the manager has recorded the request it just submitted:
// the notification is recorded all the same (the receiver finds the ToolCall through the request's
// context), and the manager reads the request as soon as its status write is done.
func TestNotificationBeforeTheStatusWriteIsKept(t *testing.T) {
	release := make(chan struct{})
	var held atomic.Bool
	e := startAsync(t, holdStatusWrites(func(tc *tg.ToolCall) bool {
		return tc.Status.Phase == tg.PhaseAwaitingApproval && tc.Status.Notification == nil && held.CompareAndSwap(false, true)
	}, release))
	h, g := e.H, e.H.G
	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	var pending []provider.Request
	g.Eventually(func(g Gomega) {
		var err error
		pending, err = e.Team.List(provider.StatusPending)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(pending).To(HaveLen(1))
	}).Should(Succeed())
	g.Eventually(held.Load).Should(BeTrue(), "the status write that records the request is held")
	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(pending[0].ID, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(func(g Gomega) {
		tc := h.Get("refund")
		g.Expect(tc.Status.RequestID).To(BeEmpty())
		g.Expect(tc.Status.Notification).NotTo(BeNil())
	}).Should(Succeed())
	close(release)
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.RequestID).To(Equal(pending[0].ID))
}

// verification posts a webhook.verification for registration and instance, signed with secret, and
// returns the status and the challenge answered.
func (e *asyncEnv) verification(secret, registration, instance string) (int, string) {
	e.H.T.Helper()
	id, challenge := uuid.NewString(), uuid.NewString()
	body := `{"id":"` + id + `","type":"webhook.verification","registration_id":"` + registration + `","instance_id":"` + instance +
		`","created_at":"` + time.Now().UTC().Format(time.RFC3339) + `","challenge":"` + challenge + `"}`
	wh, err := standardwebhooks.NewWebhook(secret)
	e.H.G.Expect(err).NotTo(HaveOccurred())
	sig, err := wh.Sign(id, time.Now(), []byte(body))
	e.H.G.Expect(err).NotTo(HaveOccurred())
	req, err := http.NewRequest(http.MethodPost, e.ReceiverURL, bytes.NewReader([]byte(body)))
	e.H.G.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := e.Client.Do(req)
	e.H.G.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	var got struct {
		Challenge string `json:"challenge"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&got)
	if got.Challenge != "" && got.Challenge != challenge {
		e.H.T.Fatalf("the receiver answered challenge %q to %q", got.Challenge, challenge)
	}
	return resp.StatusCode, got.Challenge
}

// Rotating the signing secret registers anew, with a new registration id and secret, verified by
// the provider before it commits; the receiver answers a verification only for a registration a
// provider object proposed. Notifications signed with the replaced secret are still accepted for a
// while (attempts in flight), and the new secret's are.
func TestRotationRegistersANewSecretAndTheReceiverAnswersOnlyWhatItExpects(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	first := e.DeliveryRegistered()
	verifications := e.Team.Stats().WebhookVerifications

	// Nobody proposed these: refused, whatever the signature.
	status, challenge := e.verification(e.secret(first), uuid.NewString(), first.InstanceID)
	g.Expect(status).To(Equal(http.StatusForbidden))
	g.Expect(challenge).To(BeEmpty())
	status, _ = e.verification(e.secret(first), first.RegistrationID, first.InstanceID)
	g.Expect(status).To(Equal(http.StatusForbidden), "an active registration is not proposed any more")

	ap := e.Provider(g)
	ap.Spec.Delivery.Rotation = "2026-12"
	g.Expect(h.K8s.Update(context.Background(), ap)).To(Succeed())
	var second *tg.WebhookRegistration
	g.Eventually(func(g Gomega) {
		ap := e.Provider(g)
		g.Expect(ap.Status.Delivery.Active.Rotation).To(Equal("2026-12"))
		second = ap.Status.Delivery.Active
		g.Expect(ap.Status.Delivery.Previous).To(HaveField("RegistrationID", first.RegistrationID))
	}).WithTimeout(40 * time.Second).Should(Succeed())
	e.DeliveryRegistered()
	g.Expect(second.RegistrationID).NotTo(Equal(first.RegistrationID))
	g.Expect(second.SecretName).NotTo(Equal(first.SecretName))
	g.Expect(e.secret(second)).NotTo(Equal(e.secret(first)))
	g.Expect(second.InstanceID).To(Equal(first.InstanceID))
	g.Expect(e.Team.Stats().WebhookVerifications-verifications).To(BeEquivalentTo(1), "the provider verified the new registration")

	h.ToolCall("refund", "issue_refund", th.RefundArgs, 3*time.Minute, ptr.To(2*time.Minute))
	req := h.WaitPhase("refund", tg.PhaseAwaitingApproval).Status.RequestID
	old := uuid.NewString()
	g.Expect(e.post(e.secret(first), old, time.Now(), resolved(old, first.InstanceID, req))).To(Equal(http.StatusNoContent), "in flight with the replaced secret")
	g.Eventually(func(g Gomega) { g.Expect(h.Get("refund").Status.Notification).To(HaveField("ID", old)) }).Should(Succeed())
	exp := time.Now().Add(5 * time.Minute)
	_, err := e.Team.Decide(req, provider.StatusApproved, "ok", &exp)
	g.Expect(err).NotTo(HaveOccurred())
	h.WaitPhase("refund", tg.PhaseRunning)
	g.Eventually(func() int64 { return e.Team.Stats().Delivered }).Should(BeEquivalentTo(1), "the provider's notification, signed with the new secret, was acknowledged")
}

// holdStatusWrites builds the manager's client so that a status write of a ToolCall for which hold
// says so waits until release is closed or the write's context ends.
func holdStatusWrites(hold func(*tg.ToolCall) bool, release <-chan struct{}) th.Option {
	return func(h *th.Harness) {
		h.NewClient = func(cfg *rest.Config, o client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, o)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, interceptor.Funcs{
				SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
					if tc, ok := obj.(*tg.ToolCall); ok && hold(tc) {
						select {
						case <-release:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
				},
			}), nil
		}
	}
}

// Provider objects whose status claims the instance of team (a status written by someone else: the
// manager refuses to record an instance another object holds) do not stop team's notifications: the
// receiver tries every object that claims the instance, and only the one whose secret verifies the
// message counts.
func TestNotificationsFlowWhileOthersClaimTheInstance(t *testing.T) {
	e := startAsync(t)
	h, g := e.H, e.H.G
	ctx := context.Background()
	active := e.DeliveryRegistered()
	for _, name := range []string{"claim-a", "claim-b"} {
		h.CredentialSecret(name+"-signing", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", th.Serves(name))
		ap := h.ApprovalProvider(name, e.URL, "no-such-credential")
		g.Eventually(func() error {
			if err := h.K8s.Get(ctx, client.ObjectKeyFromObject(ap), ap); err != nil {
				return err
			}
			claimed := *active
			claimed.RegistrationID, claimed.SecretName = uuid.NewString(), name+"-signing"
			ap.Status.Delivery = &tg.DeliveryStatus{Active: &claimed}
			return h.K8s.Status().Update(ctx, ap)
		}).Should(Succeed())
	}

	e.approveRefund()
	running := h.WaitPhase("refund", tg.PhaseRunning)
	g.Expect(running.Status.Notification).NotTo(BeNil(), "woken by its notification")
	g.Expect(e.Team.Stats().Delivered).To(BeEquivalentTo(1))
	g.Expect(e.Team.Stats().DeliveryFailures).To(BeZero(), "the first attempt was verified")
}
