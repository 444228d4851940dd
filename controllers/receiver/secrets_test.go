package receiver

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/providercache"
	"toolgate.dev/toolgate/internal/aapwebhook"
)

// The receiver reads a registration's signing Secret once: later messages are verified with the
// value read, and a message it does not verify reads the Secret again only once secretReread has
// passed since the last read, so forgeries cost the apiserver at most one read per Secret that often.
func TestReceiverReadsASigningSecretOnce(t *testing.T) {
	const first, second = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_HxwdHhobGBkWFxQVEhMQEQ4PDA0KCwgJBgcEBQIDAAE="
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "team-signing", Labels: map[string]string{tg.LabelProvider: "team"}},
		Data: map[string][]byte{providercache.SigningSecretKey: []byte(first)}}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	reads := 0
	live := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(secret).Build(), interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			reads++
			return c.Get(ctx, key, obj, opts...)
		},
	})
	clock := clocktesting.NewFakePassiveClock(now)
	rc := &Receiver{Clock: clock, Providers: providercache.New(nil, live, nil, "", nil)}
	obj := &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "team", UID: "6a1f0c2e"}}
	k := providercache.Key{Kind: tg.KindApprovalProvider, Namespace: "team", Name: "team"}
	reg := &tg.WebhookRegistration{RegistrationID: uuid.NewString(), SecretName: "team-signing"}
	check := func(signedWith string) error {
		t.Helper()
		id := uuid.NewString()
		body := []byte(`{"id":"` + id + `","type":"request.resolved","instance_id":"` + uuid.NewString() + `","request_id":"` + uuid.NewString() + `","created_at":"` + now.Format(time.RFC3339) + `"}`)
		wh, err := standardwebhooks.NewWebhook(signedWith)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := wh.Sign(id, now, body)
		if err != nil {
			t.Fatal(err)
		}
		m, err := aapwebhook.Peek(body)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {strconv.FormatInt(now.Unix(), 10)}, "Webhook-Signature": {sig}}
		return rc.check(context.Background(), k, obj, reg, m, body, h)
	}

	for _, step := range []struct {
		name      string
		signed    string
		secret    string        // the Secret's value from this step on, when set
		later     time.Duration // how far the clock moves before the step
		reads     int           // Secret reads so far
		forgedErr bool
	}{
		{name: "the first message reads the Secret", signed: first, reads: 1},
		{name: "the next is verified with the value remembered", signed: first, reads: 1},
		{name: "a forgery is refused without reading the Secret again", signed: second, reads: 1, forgedErr: true},
		{name: "and so is the next, just before the reread interval", signed: second, later: secretReread - time.Second, reads: 1, forgedErr: true},
		{name: "a forgery after the interval reads it once, and is refused", signed: second, later: time.Second, reads: 2, forgedErr: true},
		{name: "the remembered value still verifies", signed: first, reads: 2},
		{name: "a Secret replaced under the same name is not read again at once", signed: second, secret: second, reads: 2, forgedErr: true},
		{name: "it is read once the interval passed", signed: second, later: secretReread, reads: 3},
		{name: "and its value is remembered", signed: second, reads: 3},
	} {
		clock.SetTime(clock.Now().Add(step.later))
		if step.secret != "" {
			secret.Data[providercache.SigningSecretKey] = []byte(step.secret)
			if err := live.Update(context.Background(), secret); err != nil {
				t.Fatal(err)
			}
		}
		err := check(step.signed)
		if got := errors.Is(err, aapwebhook.ErrUnauthenticated); got != step.forgedErr || (err != nil && !step.forgedErr) {
			t.Errorf("%s: check = %v, want refused %v", step.name, err, step.forgedErr)
		}
		if reads != step.reads {
			t.Errorf("%s: %d Secret reads, want %d", step.name, reads, step.reads)
		}
	}
}
