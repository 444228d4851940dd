package chaos

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

// The asynchronous mode of the run (-chaos.profiles async, or full-async, seed-async). The namespace's
// provider object provisions its instance (spec.provisioning, with a provisioner token) and registers
// a delivery to the manager's webhook receiver (spec.delivery), so that its calls wait with no long
// poll and learn of their decisions from request.resolved notifications. Every manager process
// serves the receiver on the same loopback port, with the same certificate (a test CA the provider
// trusts): each kill takes the receiver down until the next process has synced its caches and
// listens again, so the receiver restarts with every kill, and the provider's attempts meanwhile
// fail and are retried. On top of that the provider's delivery faults (op deliver) drop attempts
// (failed unsent, then retried), duplicate deliveries (the same event twice at once) and delay some
// (later notifications overtake them). Halfway through the agent's calls, where the synchronous mode
// deletes the provider object, the asynchronous mode rotates its delivery (spec.delivery.rotation):
// the manager registers a new registration id and signing secret, which the provider verifies
// through the receiver (under the kills and the instance operations' faults), and the receiver
// accepts both the old and the new signatures meanwhile. Deleting a provider object with an instance
// of its own deletes the instance, which cancels its pending requests at once (with no notification):
// that ends every waiting call of the object and would leave the run's second half nothing
// asynchronous to wait for, so the asynchronous mode keeps its object (the synchronous runs cover the
// deletion).
//
// Dropping is of attempts only: the run never loses a notification for good. A notification lost
// for good is found by the manager's hourly safety read, or at the give-up read at the provider's
// deadline, which in a window of 20 to 40s is after the approval limit: such a call would end
// WaitingLimitReached however early its human approved it, and the liveness invariant would have to
// excuse every approval whose notification was lost rather than bound its delay. The run keeps the
// invariant as it is and leaves that path to the controllers' envtest scenarios.

// variant is one run: a provider profile in one mode.
type variant struct {
	name    string
	profile reference.Profile
	async   bool
}

// parseVariant reads one entry of -chaos.profiles: a provider profile (full, seed), in synchronous
// mode, or with -async in asynchronous mode; async alone is full-async.
func parseVariant(entry string) (variant, error) {
	if entry == "async" {
		entry = "full-async"
	}
	name, async := strings.CutSuffix(entry, "-async")
	p, err := reference.ParseProfile(name)
	if err != nil || name == "" {
		return variant{}, fmt.Errorf("%q: use full, seed, async (full-async) or seed-async", entry)
	}
	if async {
		return variant{name: string(p) + "-async", profile: p, async: true}, nil
	}
	return variant{name: string(p), profile: p}, nil
}

// mode describes the variant's mode for the report.
func (v variant) mode() string {
	if v.async {
		return "asynchronous mode (notifications to the manager's receiver, which every kill restarts)"
	}
	return "synchronous mode (long polls)"
}

// provisionerToken is the reference provider's provisioner token in asynchronous mode.
const provisionerToken = "chaos-provisioner-token"

// The provider's notification retry schedule in the run: the first retry after deliveryRetry,
// doubling, at most deliveryRetryCap apart (plus up to 20% jitter). The defaults (10s, then 20s, 40s,
// ...) suit a receiver down for minutes; the run compresses time as it compresses the manager's
// margins (waiting limits of 20 to 40s, a kill every 2 to 5s), so that an attempt comes soon after a
// restarted receiver listens.
const (
	deliveryRetry    = 250 * time.Millisecond
	deliveryRetryCap = time.Second
	// reorderDelay is how long a delay fault holds a delivery attempt: later notifications overtake it.
	reorderDelay = 2 * time.Second
)

// receiver is the manager's webhook receiver, the same for every manager process of a run.
type receiver struct {
	ca   *testcert.CA
	addr string // the loopback address each process binds
	dir  string // the certificate directory (tls.crt, tls.key)
	url  string
}

// newReceiver picks a free loopback port and issues the receiver's certificate.
func newReceiver(t *testing.T) *receiver {
	t.Helper()
	ca := testcert.NewCA(t, "chaos receiver CA")
	dir := t.TempDir()
	testcert.WriteKeyPair(t, dir, ca.ServerCert(t))
	addr, err := th.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return &receiver{ca: ca, addr: addr, dir: dir, url: "https://" + addr + controllers.ReceiverPath}
}

// flags are the manager flags that serve the receiver.
func (r *receiver) flags() []string {
	if r == nil {
		return nil
	}
	return []string{"--receiver-bind-address", r.addr, "--receiver-cert-dir", r.dir}
}

// providerOptions let the reference provider provision instances and deliver to the receiver.
func (r *receiver) providerOptions(o *reference.Options) {
	o.ProvisionerToken = provisionerToken
	o.AllowedWebhookNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	o.WebhookRootCAs = r.ca.Pool()
	o.WebhookRetryDelay, o.WebhookMaxRetryDelay = deliveryRetry, deliveryRetryCap
	o.WebhookTimeout = 3 * time.Second
}

// asyncProvider creates the namespace's ApprovalProvider named default in asynchronous mode: its
// instance provisioned with the provisioner token (in the Secret the run rotates), its delivery to
// the receiver.
func asyncProvider(g Gomega, h *th.Harness, r *receiver) {
	ctx := context.Background()
	g.Expect(h.K8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: credentialSecret, Labels: map[string]string{tg.LabelProvider: tg.DefaultProviderName}},
		StringData: map[string]string{"token": provisionerToken}})).To(Succeed())
	g.Expect(h.K8s.Create(ctx, &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: tg.DefaultProviderName},
		Spec: tg.ApprovalProviderSpec{URL: h.URL, AllowInsecureHTTP: true,
			Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: credentialSecret, Key: "token"}},
			Delivery:     &tg.Delivery{ReceiverURL: r.url}},
	})).To(Succeed())
}

// rotatedDelivery is the spec.delivery.rotation the run sets halfway through the agent's calls.
const rotatedDelivery = "chaos-rotated"

// rotateDelivery changes the namespace's provider's spec.delivery.rotation: a new registration.
func rotateDelivery(ctx context.Context, h *th.Harness) {
	for range 5 {
		ap := &tg.ApprovalProvider{}
		if err := h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}, ap); err != nil || ap.Spec.Delivery == nil {
			return
		}
		ap.Spec.Delivery.Rotation = rotatedDelivery
		if err := h.K8s.Update(ctx, ap); err == nil {
			return
		}
	}
}

// waitDeliveryRegistered waits until the namespace's provider has an active delivery registration for
// its instance, made for the given rotation, and returns the instance.
func waitDeliveryRegistered(g Gomega, h *th.Harness, rotation string) string {
	var instance string
	g.Eventually(func(g Gomega) {
		ap := &tg.ApprovalProvider{}
		g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}, ap)).To(Succeed())
		c := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(ap.Status.Instance).NotTo(BeNil())
		g.Expect(ap.Status.Delivery.Active).NotTo(BeNil())
		g.Expect(ap.Status.Delivery.Active.InstanceID).To(Equal(ap.Status.Instance.ID))
		g.Expect(ap.Status.Delivery.Active.Rotation).To(Equal(rotation))
		instance = ap.Status.Instance.ID
	}).WithTimeout(time.Minute).Should(Succeed())
	return instance
}

// keysOf returns the Idempotency-Keys of the default instance (the manager's flags, and the namespace's
// provider in synchronous mode) and of the provisioned instances, key -> request id.
func keysOf(h *th.Harness, instances []string) func() (map[string]string, error) {
	return func() (map[string]string, error) {
		all, err := h.Provider.Keys()
		if err != nil {
			return nil, err
		}
		for _, in := range instances {
			keys, err := h.Provider.KeysOf(in)
			if err != nil {
				return nil, err
			}
			for k, id := range keys {
				all[k] = id
			}
		}
		return all, nil
	}
}

// deliveryFaultRules are the faults on notification deliveries in asynchronous mode: the first
// attempts meet one of each for certain (a drop, a duplicate, a delay), then they fire at random.
func deliveryFaultRules() []faults.Rule {
	return []faults.Rule{
		{Op: faults.OpDeliver, Kind: faults.DropDelivery, Count: 1},
		{Op: faults.OpDeliver, Kind: faults.Duplicate, Count: 1},
		{Op: faults.OpDeliver, Kind: faults.Delay, Count: 1, Delay: reorderDelay},

		{Op: faults.OpDeliver, Kind: faults.DropDelivery, Probability: 0.10},
		{Op: faults.OpDeliver, Kind: faults.Duplicate, Probability: 0.08},
		{Op: faults.OpDeliver, Kind: faults.Delay, Probability: 0.05, Delay: reorderDelay},
	}
}

// deliveryAllowance is what asynchronous mode adds to the liveness bound (liveBound). A decision
// reaches the manager as a notification, which the provider attempts at once and then every
// deliveryRetryCap at most (1.2s with the jitter). Each kill takes the receiver down until the next
// process has synced its caches: the bound's two lost lives and the start cover that, as they cover
// a long poll that nobody holds meanwhile. Once the receiver listens again:
//
//   - the next attempt comes within one retry gap (1.2s);
//   - it may be dropped (10%, about one in ten; two in a row 1%): one more gap;
//   - it may be delayed (5%): reorderDelay (2s), while later ones overtake it.
//
// Once the receiver has recorded the notification on the ToolCall the decision is as safe as a
// long poll's answer: a kill after that loses nothing (the next process reads the request for the
// notification recorded on the call), and the read and the Job are the bound's retries and
// reconcile. Not covered, as two lost lives in a row are not in the synchronous bound: a receiver's
// 503 (its read of a request it cannot place yet failing under the GET faults), which asks for 5s
// (Retry-After); and a notification lost for good, which the run never causes (see above).
func deliveryAllowance() time.Duration {
	gap := deliveryRetryCap * 6 / 5
	return 2*gap + reorderDelay
}

// notified counts the ToolCalls that exist and have a notification recorded on them.
func notified(ctx context.Context, h *th.Harness) int {
	list := &tg.ToolCallList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return 0
	}
	n := 0
	for _, tc := range list.Items {
		if tc.Status.Notification != nil {
			n++
		}
	}
	return n
}
