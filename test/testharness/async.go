package testharness

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
)

// Async is a manager with its webhook receiver on loopback (HTTPS, a test CA), and a reference
// provider that delivers notifications to it, with an ApprovalProvider "team" in asynchronous mode
// that serves Tool issue-refund.
type Async struct {
	H *Harness
	// Team is the delivering provider, at URL.
	Team *reference.Server
	URL  string
	// ReceiverURL is where the provider delivers; Client trusts the receiver's certificate.
	ReceiverURL string
	Client      *http.Client
}

// withReceiver serves the manager's receiver on a free loopback port with a certificate of ca.
func withReceiver(t testing.TB, ca *testcert.CA) (Option, string) {
	t.Helper()
	dir := t.TempDir()
	testcert.WriteKeyPair(t, dir, ca.ServerCert(t))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return func(h *Harness) {
		h.Opts.ReceiverBindAddress, h.Opts.ReceiverCertDir = addr, dir
	}, "https://" + addr + controllers.ReceiverPath
}

// NewAsync starts the manager with its receiver, the delivering provider, and ApprovalProvider team
// with spec.delivery, waits until its delivery is registered, and creates Tool issue-refund for it.
func NewAsync(t testing.TB, env *Env, opts ...Option) *Async {
	t.Helper()
	ca := testcert.NewCA(t, "receiver CA")
	recv, receiverURL := withReceiver(t, ca)
	h := New(t, env, append([]Option{recv}, opts...)...)
	team, err := reference.New(reference.Options{Credential: TeamCredential, ProvisionerToken: TeamProvisioner,
		AllowedWebhookNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, WebhookRootCAs: ca.Pool()})
	h.G.Expect(err).NotTo(HaveOccurred())
	url, err := team.Start("127.0.0.1:0")
	h.G.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = team.Close() })
	h.CredentialSecret("team-provisioner", TeamProvisioner, Serves("team"))
	ap := &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: h.NS},
		Spec: tg.ApprovalProviderSpec{URL: url, AllowInsecureHTTP: true,
			Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "team-provisioner", Key: "token"}},
			Delivery:     &tg.Delivery{ReceiverURL: receiverURL}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), ap)).To(Succeed())
	a := &Async{H: h, Team: team, URL: url, ReceiverURL: receiverURL,
		Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}}
	a.DeliveryRegistered()
	h.Tool("issue-refund", "issue_refund", RefundSchema, WithProviderRef(tg.KindApprovalProvider, "team"))
	return a
}

// DeliveryRegistered waits until team's Delivery condition is True for its current generation and
// returns its active registration.
func (a *Async) DeliveryRegistered() *tg.WebhookRegistration {
	a.H.T.Helper()
	var reg *tg.WebhookRegistration
	a.H.G.Eventually(func(g Gomega) {
		ap := a.Provider(g)
		c := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(c.Reason).To(Equal(tg.ReasonRegistered))
		g.Expect(c.ObservedGeneration).To(Equal(ap.Generation))
		g.Expect(ap.Status.Delivery.Active.InstanceID).To(Equal(ap.Status.Instance.ID))
		reg = ap.Status.Delivery.Active
	}).WithTimeout(40 * time.Second).Should(Succeed())
	return reg
}

// Provider reads ApprovalProvider team.
func (a *Async) Provider(g Gomega) *tg.ApprovalProvider {
	ap := &tg.ApprovalProvider{}
	g.Expect(a.H.K8s.Get(context.Background(), types.NamespacedName{Namespace: a.H.NS, Name: "team"}, ap)).To(Succeed())
	return ap
}
