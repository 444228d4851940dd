package testharness

import (
	"context"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// The instance credential and the provisioner token of the second provider StartTeamProvider runs.
const (
	TeamCredential  = "tg-team-instance-credential"
	TeamProvisioner = "tg-team-provisioner-token"
)

// StartTeamProvider runs a second reference provider on loopback, apart from the harness's (which
// the manager's flags name), and returns it with its URL.
func (h *Harness) StartTeamProvider() (*reference.Server, string) {
	h.T.Helper()
	srv, err := reference.New(reference.Options{Credential: TeamCredential, ProvisionerToken: TeamProvisioner, Faults: faults.New(0)})
	h.G.Expect(err).NotTo(HaveOccurred())
	url, err := srv.Start("127.0.0.1:0")
	h.G.Expect(err).NotTo(HaveOccurred())
	h.T.Cleanup(func() { _ = srv.Close() })
	return srv, url
}

// Serves is the label by which a Secret consents to serve the ApprovalProvider named provider.
func Serves(provider string) map[string]string { return map[string]string{tg.LabelProvider: provider} }

// CredentialSecret writes Secret name in the harness namespace with token under key "token" and the
// given labels (the consent to serve a provider object: Serves).
func (h *Harness) CredentialSecret(name, token string, labels map[string]string) {
	h.T.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS, Labels: labels}, StringData: map[string]string{"token": token}}
	cur := &corev1.Secret{}
	if err := h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, cur); err == nil {
		cur.Data = map[string][]byte{"token": []byte(token)}
		cur.Labels = labels
		h.G.Expect(h.K8s.Update(context.Background(), cur)).To(Succeed())
		return
	}
	h.G.Expect(h.K8s.Create(context.Background(), s)).To(Succeed())
}

// ApprovalProvider creates an ApprovalProvider for the plain-HTTP provider at url, with its instance
// credential in Secret secret.
func (h *Harness) ApprovalProvider(name, url, secret string) *tg.ApprovalProvider {
	h.T.Helper()
	ap := &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS},
		Spec: tg.ApprovalProviderSpec{URL: url, AllowInsecureHTTP: true,
			CredentialSecretRef: &tg.SecretKeyRef{Name: secret, Key: "token"}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), ap)).To(Succeed())
	return ap
}

// ProvisionedProvider creates an ApprovalProvider that provisions its own instance at url with the
// token in Secret secret.
func (h *Harness) ProvisionedProvider(name, url, secret string) *tg.ApprovalProvider {
	h.T.Helper()
	ap := &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS},
		Spec: tg.ApprovalProviderSpec{URL: url, AllowInsecureHTTP: true, Provisioning: &tg.Provisioning{
			ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: secret, Key: "token"}, InstanceName: "payments agents",
		}},
	}
	h.G.Expect(h.K8s.Create(context.Background(), ap)).To(Succeed())
	return ap
}

// ProviderReady waits until the ApprovalProvider's Ready condition has status and reason, for its
// generation, and returns it.
func (h *Harness) ProviderReady(name string, status metav1.ConditionStatus, reason string) metav1.Condition {
	h.T.Helper()
	return h.ReadyCondition(&tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: name}}, status, reason)
}

// ReadyCondition waits until provider object obj (an ApprovalProvider or a ClusterApprovalProvider,
// by its key) has a Ready condition with status and reason, for its generation, and returns it.
func (h *Harness) ReadyCondition(obj tg.GenericProvider, status metav1.ConditionStatus, reason string) metav1.Condition {
	h.T.Helper()
	var cond metav1.Condition
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)).To(Succeed())
		c := meta.FindStatusCondition(obj.GetStatus().Conditions, tg.ConditionReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.ObservedGeneration).To(Equal(obj.GetGeneration()))
		g.Expect(obj.GetStatus().ObservedGeneration).To(Equal(obj.GetGeneration()))
		g.Expect(c.Status).To(Equal(status), c.Message)
		g.Expect(c.Reason).To(Equal(reason), c.Message)
		cond = *c
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return cond
}

// ReadyTeamProvider starts a second reference provider and makes the ApprovalProvider name for it,
// with its instance credential in Secret team-credential, and waits until it is Ready.
func (h *Harness) ReadyTeamProvider(name string) *reference.Server {
	h.T.Helper()
	team, url := h.StartTeamProvider()
	h.CredentialSecret("team-credential", TeamCredential, Serves(name))
	h.ApprovalProvider(name, url, "team-credential")
	h.ProviderReady(name, metav1.ConditionTrue, tg.ReasonReachable)
	return team
}

// WithProviderRef sends a harness Tool's calls to the provider object of kind and name.
func WithProviderRef(kind, name string) func(*tg.Tool) {
	return func(t *tg.Tool) { t.Spec.ProviderRef = &tg.ProviderRef{Kind: kind, Name: name} }
}

// UnansweredSubmission creates ToolCall refund, whose first POST to srv is committed but its response
// lost, while every POST after it fails until the test clears srv's faults, and returns the committed
// request.
func (h *Harness) UnansweredSubmission(srv *reference.Server) provider.Request {
	h.T.Helper()
	h.G.Expect(srv.Faults().Set(
		faults.Rule{Op: faults.OpSubmit, Kind: faults.DropAfterCommit, Count: 1},
		faults.Rule{Op: faults.OpSubmit, Kind: faults.Error5xx, Probability: 1},
	)).To(Succeed())
	h.ToolCall("refund", "issue_refund", RefundArgs, 2*time.Minute, ptr.To(time.Minute))
	var req provider.Request
	h.G.Eventually(func(g Gomega) {
		all, err := srv.List("")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(all).To(HaveLen(1), "the committed request")
		req = all[0]
	}).Should(Succeed())
	return req
}
