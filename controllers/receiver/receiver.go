// Package receiver is the manager's AAP webhook receiver (asynchronous mode): it answers providers'
// verification messages and has notifications recorded on the ToolCalls they concern.
package receiver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/mergepatch"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/internal/aapwebhook"
	"toolgate.dev/toolgate/internal/provider"
)

// Path is where the receiver takes AAP's webhook messages.
const Path = "/aap/events"

// RecordWait is how long the receiver leaves the record of a notification to the read it wakes. That
// read records the notification in the status write that applies what it read, so a decision costs
// one status write instead of two, and none before its Job; past RecordWait the receiver writes the
// record itself and answers the provider.
const RecordWait = 3 * time.Second

// messages counts the messages the receiver answered.
var messages = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "toolgate_webhook_messages_total",
	Help: "AAP webhook messages the receiver answered, by type (verification, notification, unknown) and outcome (accepted, duplicate, discarded, malformed, unauthenticated, unknown_registration, too_large, unavailable).",
}, []string{"type", "outcome"})

func init() { metrics.Registry.MustRegister(messages) }

// Receiver is the manager's AAP webhook receiver (asynchronous mode). It answers a provider's
// verification message for a registration a provider object proposed, and has a request.resolved
// notification recorded on the ToolCall it concerns before acknowledging it, so that a crash after
// the answer loses nothing: the ToolCall controller reads the request at once and records the
// notification in the same status write as what it read, or the receiver writes the record itself
// when that write does not land within RecordWait. A notification never carries a decision: it only
// makes the manager read the request.
type Receiver struct {
	// Cache reads provider objects and ToolCalls as the controllers see them; Client writes the
	// ToolCall's status and reads what the cache may not show yet.
	Cache     client.Reader
	Client    client.Client
	APIReader client.Reader
	Clock     clock.PassiveClock
	Log       logr.Logger
	Providers *providercache.Registry
	// HandOver queues a call to read its request, and leaves the record of its notification to
	// that read's status write (the ToolCall controller's HandOver).
	HandOver func(*tg.ToolCall, tg.Notification) (written <-chan struct{}, release func())
	// secrets are the signing secrets last read, by Secret (signingSecrets).
	secrets signingSecrets
}

// signingSecrets remembers the signing secret of each registration's Secret once it verified a
// message, so that a notification costs no Secret read. A registration's secret never changes (a
// rotation is a new registration with a new Secret), and the provider signs with what was
// registered whatever becomes of the Secret; a message the remembered value does not verify reads
// the Secret again.
type signingSecrets struct {
	mu sync.Mutex
	by map[types.NamespacedName]readSecret
}

// readSecret is a signing secret's value and when it was read.
type readSecret struct {
	value string
	at    time.Time
}

// secretReread is how soon after reading a signing Secret a message its value does not verify may
// read it again. Messages are unauthenticated until verified: without this bound every forgery that
// names a known instance would cost the apiserver a Secret read.
const secretReread = 10 * time.Second

// get returns the value last read from Secret name, and whether a message it does not verify may read
// the Secret again at now.
func (s *signingSecrets) get(name types.NamespacedName, now time.Time) (value string, known, reread bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.by[name]
	return v.value, ok, !ok || now.Sub(v.at) >= secretReread
}

func (s *signingSecrets) put(name types.NamespacedName, v string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[types.NamespacedName]readSecret{}
	}
	s.by[name] = readSecret{value: v, at: now}
}

// answer is the receiver's reply to a message: its HTTP status, the outcome counted, the challenge
// of an accepted verification, and why it was refused.
type answer struct {
	status    int
	outcome   string
	challenge string
	err       error
}

func (rc *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path != Path {
		http.NotFound(w, req)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "only POST", http.StatusMethodNotAllowed)
		return
	}
	kind, a := rc.handle(req.Context(), w, req)
	messages.WithLabelValues(kind, a.outcome).Inc()
	if a.err != nil {
		rc.Log.V(1).Info("webhook message not accepted", "type", kind, "status", a.status, "outcome", a.outcome, "error", a.err.Error())
	}
	switch {
	case a.challenge != "":
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]string{"challenge": a.challenge})
	case a.status == http.StatusNoContent:
		w.WriteHeader(a.status)
	default:
		if a.status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		http.Error(w, a.outcome, a.status)
	}
}

// handle reads, verifies and acts on one message; kind is its type for the metric.
func (rc *Receiver) handle(ctx context.Context, w http.ResponseWriter, req *http.Request) (kind string, a answer) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, aapwebhook.MaxBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "unknown", answer{status: http.StatusRequestEntityTooLarge, outcome: "too_large", err: err}
		}
		return "unknown", answer{status: http.StatusBadRequest, outcome: "malformed", err: err}
	}
	m, err := aapwebhook.Peek(body)
	if err != nil {
		return "unknown", answer{status: http.StatusBadRequest, outcome: "malformed", err: err}
	}
	if m.Type == aapwebhook.TypeVerification {
		return "verification", rc.verify(ctx, m, body, req.Header)
	}
	return "notification", rc.notify(ctx, m, body, req.Header)
}

// verify answers a verification message: only for a registration a provider object proposed, for the
// instance it proposed it for, signed with its secret.
func (rc *Receiver) verify(ctx context.Context, m aapwebhook.Message, body []byte, h http.Header) answer {
	claims, err := providercache.By(ctx, rc.Cache, providercache.RegistrationField, m.RegistrationID)
	if err != nil {
		return answer{status: http.StatusServiceUnavailable, outcome: "unavailable", err: err}
	}
	var reg *tg.WebhookRegistration
	var checked error
	for _, c := range claims {
		d := c.Obj.GetStatus().Delivery
		if d == nil || d.Proposed == nil || d.Proposed.RegistrationID != m.RegistrationID {
			continue
		}
		if checked = rc.check(ctx, c.Key, c.Obj, d.Proposed, m, body, h); checked == nil {
			reg = d.Proposed
			break
		}
	}
	switch {
	case reg == nil && checked == nil:
		return answer{status: http.StatusForbidden, outcome: "unknown_registration", err: fmt.Errorf("no provider object proposed registration %s", m.RegistrationID)}
	case reg == nil:
		return answer{status: statusOf(checked), outcome: outcomeOf(checked), err: checked}
	}
	if m.InstanceID != reg.InstanceID {
		return answer{status: http.StatusForbidden, outcome: "unknown_registration", err: fmt.Errorf("registration %s is for instance %s, not %s", reg.RegistrationID, reg.InstanceID, m.InstanceID)}
	}
	return answer{status: http.StatusOK, outcome: "accepted", challenge: m.Challenge}
}

// notify records a notification on the ToolCall whose request it names. A notification for a call
// that ended, or for a request no call has, is acknowledged and dropped: nothing waits for it.
func (rc *Receiver) notify(ctx context.Context, m aapwebhook.Message, body []byte, h http.Header) answer {
	claims, err := providercache.By(ctx, rc.Cache, providercache.InstanceField, m.InstanceID)
	if err != nil {
		return answer{status: http.StatusServiceUnavailable, outcome: "unavailable", err: err}
	}
	if len(claims) == 0 {
		return answer{status: http.StatusUnauthorized, outcome: "unauthenticated", err: fmt.Errorf("no registration of instance %s", m.InstanceID)}
	}
	var k providercache.Key
	var verr error = fmt.Errorf("%w: no registration of instance %s verifies it", aapwebhook.ErrUnauthenticated, m.InstanceID)
	for _, c := range claims {
		for _, reg := range rc.registrationsOf(c.Obj, m.InstanceID) {
			if verr = rc.check(ctx, c.Key, c.Obj, reg, m, body, h); verr == nil {
				k = c.Key
				break
			}
		}
		if verr == nil {
			break
		}
	}
	if verr != nil {
		return answer{status: statusOf(verr), outcome: outcomeOf(verr), err: verr}
	}
	tc, err := rc.callOf(ctx, k, m)
	switch {
	case err != nil:
		return answer{status: http.StatusServiceUnavailable, outcome: "unavailable", err: err}
	case tc == nil || tc.Status.Phase.IsTerminal():
		return answer{status: http.StatusNoContent, outcome: "discarded"}
	case tc.Status.Notification != nil && tc.Status.Notification.ID == m.ID:
		return answer{status: http.StatusNoContent, outcome: "duplicate"}
	}
	// The read the notification wakes records it in its own status write, with the decision; the
	// 2xx waits for that write, or for the receiver's own once RecordWait passed without it.
	n := tg.Notification{ID: m.ID, ReceivedAt: metav1.NewTime(rc.Clock.Now())}
	written, release := rc.HandOver(tc, n)
	defer release()
	if written != nil {
		wait := time.NewTimer(RecordWait)
		defer wait.Stop()
		select {
		case <-written:
			return answer{status: http.StatusNoContent, outcome: "accepted"}
		case <-ctx.Done():
			return answer{status: http.StatusServiceUnavailable, outcome: "unavailable", err: ctx.Err()}
		case <-wait.C:
		}
	}
	patch := mergepatch.Status(*tc.Status.DeepCopy())
	tc.Status.Notification = &n
	if err := rc.Client.Status().Patch(ctx, tc, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return answer{status: http.StatusNoContent, outcome: "discarded"}
		}
		return answer{status: http.StatusServiceUnavailable, outcome: "unavailable", err: fmt.Errorf("recording the notification on ToolCall %s/%s: %w", tc.Namespace, tc.Name, err)}
	}
	return answer{status: http.StatusNoContent, outcome: "accepted"}
}

// registrationsOf are the registrations of obj that may have signed a notification for instance: the
// active one, and the one it replaced (for a replaced instance, or for attempts in flight shortly
// after a rotation).
func (rc *Receiver) registrationsOf(obj tg.GenericProvider, instance string) []*tg.WebhookRegistration {
	d := obj.GetStatus().Delivery
	if d == nil {
		return nil
	}
	var out []*tg.WebhookRegistration
	if a := d.Active; a != nil && a.InstanceID == instance {
		out = append(out, a)
	}
	if p := d.Previous; p != nil && p.InstanceID == instance {
		replacedRecently := d.Active != nil && d.Active.Since != nil && rc.Clock.Since(d.Active.Since.Time) <= providercache.PreviousGrace
		if replacedRecently || (d.Active != nil && d.Active.InstanceID != instance) {
			out = append(out, p)
		}
	}
	return out
}

// check verifies message m with the signing secret of registration reg.
func (rc *Receiver) check(ctx context.Context, k providercache.Key, obj tg.GenericProvider, reg *tg.WebhookRegistration, m aapwebhook.Message, body []byte, h http.Header) error {
	name := types.NamespacedName{Namespace: rc.Providers.NamespaceOf(k), Name: reg.SecretName}
	now := rc.Clock.Now()
	known, ok, reread := rc.secrets.get(name, now)
	if ok {
		err := aapwebhook.Verify(known, m, body, h, now)
		if err == nil || !reread {
			// Verified, or refused with the value read moments ago: the Secret is not read again.
			return err
		}
	}
	secret, err := rc.Providers.SecretValue(ctx, k, obj.GetUID(), name, providercache.SigningSecretKey)
	if err != nil {
		return fmt.Errorf("%w: the signing secret of registration %s: %v", errUnavailable, reg.RegistrationID, err)
	}
	// Remembered whatever the message: the value is the Secret's, and a forgery read it.
	rc.secrets.put(name, secret, now)
	return aapwebhook.Verify(secret, m, body, h, now)
}

var errUnavailable = errors.New("unavailable")

func statusOf(err error) int {
	switch {
	case errors.Is(err, aapwebhook.ErrMalformed):
		return http.StatusBadRequest
	case errors.Is(err, aapwebhook.ErrUnauthenticated):
		return http.StatusUnauthorized
	}
	return http.StatusServiceUnavailable
}

func outcomeOf(err error) string {
	switch statusOf(err) {
	case http.StatusBadRequest:
		return "malformed"
	case http.StatusUnauthorized:
		return "unauthenticated"
	}
	return "unavailable"
}

// callOf finds the unfinished ToolCall whose request the notification names, submitted to its
// instance of provider k. One whose request id the status does not show yet (the notification came
// before the status write of its submission) is found through the request itself: its context names
// the ToolCall.
func (rc *Receiver) callOf(ctx context.Context, k providercache.Key, m aapwebhook.Message) (*tg.ToolCall, error) {
	calls := &tg.ToolCallList{}
	if err := rc.Cache.List(ctx, calls, client.MatchingFields{RequestIDField: m.RequestID}); err != nil {
		return nil, err
	}
	for i := range calls.Items {
		if tc := &calls.Items[i]; rc.submittedTo(tc, k, m.InstanceID) {
			return tc, nil
		}
	}
	c, _, err := rc.Providers.Client(ctx, k, false, m.InstanceID)
	if err != nil {
		return nil, err
	}
	lc, ok := c.(interface {
		Lookup(context.Context, string) (*provider.Request, error)
	})
	if !ok {
		return nil, nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := lc.Lookup(rctx, m.RequestID)
	if provider.CodeOf(err) == provider.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	key, uid, found := lifecycle.ContextToolCall(req.Context)
	if !found {
		// The provider does not echo the context. A request this young may be one whose submission's
		// status write has not landed yet: the provider is asked to deliver again shortly.
		if rc.Clock.Since(req.CreatedAt) < time.Minute {
			return nil, fmt.Errorf("request %s is not recorded on a ToolCall yet", m.RequestID)
		}
		return nil, nil
	}
	tc := &tg.ToolCall{}
	if err := rc.APIReader.Get(ctx, key, tc); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if tc.UID != uid || !rc.submittedTo(tc, k, m.InstanceID) {
		return nil, nil
	}
	return tc, nil
}

// submittedTo reports whether tc's request was submitted to instance of provider k.
func (rc *Receiver) submittedTo(tc *tg.ToolCall, k providercache.Key, instance string) bool {
	got, err := providercache.Accepted(tc)
	return err == nil && got == k && lifecycle.ReadRecord(tc).Instance == instance
}

// RequestIDField indexes ToolCalls by their request id: how the receiver finds the call a
// notification is for. The manager registers it with its other indexes when the receiver runs.
const RequestIDField = "toolgate.dev/request-id"

// IndexToolCallsByRequestID is the indexer of RequestIDField.
func IndexToolCallsByRequestID(o client.Object) []string {
	if id := o.(*tg.ToolCall).Status.RequestID; id != "" {
		return []string{id}
	}
	return nil
}
