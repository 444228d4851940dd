package chaos

import (
	"context"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	th "toolgate.dev/toolgate/test/testharness"
)

// credentialSecret is the Secret of the namespace's provider object.
const credentialSecret = "approvals-credential"

// namespaceProvider creates the namespace's ApprovalProvider named default, for the provider the
// manager's flags name (its URL, the static credential's instance): every call of the run is
// accepted with it and goes through a provider object, its client and its Ready condition.
func namespaceProvider(g Gomega, h *th.Harness) {
	ctx := context.Background()
	g.Expect(h.K8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: credentialSecret, Labels: map[string]string{tg.LabelProvider: tg.DefaultProviderName}},
		StringData: map[string]string{"token": th.Credential}})).To(Succeed())
	g.Expect(h.K8s.Create(ctx, &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: tg.DefaultProviderName},
		Spec: tg.ApprovalProviderSpec{URL: h.URL, AllowInsecureHTTP: true,
			CredentialSecretRef: &tg.SecretKeyRef{Name: credentialSecret, Key: "token"}},
	})).To(Succeed())
}

// waitProviderReady waits until the manager found the namespace's provider Ready.
func waitProviderReady(g Gomega, h *th.Harness) {
	g.Eventually(func(g Gomega) {
		ap := &tg.ApprovalProvider{}
		g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}, ap)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(ap.Status.Conditions, tg.ConditionReady)).To(BeTrue(), "%v", ap.Status.Conditions)
	}).WithTimeout(time.Minute).Should(Succeed())
}

// rotateCredential rewrites the provider object's Secret (its instance credential, or in asynchronous
// mode its provisioner token), as a rotation does: new content (the same credential, with or without a final newline, which the manager trims: the reference provider has one
// credential per instance) and a new resourceVersion, which the manager reads again at its next probe
// or 401. It reports whether the write went through.
func rotateCredential(ctx context.Context, h *th.Harness, n int, credential string) bool {
	s := &corev1.Secret{}
	if err := h.K8s.Get(ctx, client.ObjectKey{Namespace: h.NS, Name: credentialSecret}, s); err != nil {
		return false
	}
	token := credential
	if n%2 == 1 {
		token += "\n"
	}
	s.Data = map[string][]byte{"token": []byte(token)}
	return h.K8s.Update(ctx, s) == nil
}

// deleteNamespaceProvider deletes the namespace's provider object mid-run.
func deleteNamespaceProvider(ctx context.Context, h *th.Harness) {
	_ = h.K8s.Delete(ctx, &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: tg.DefaultProviderName}})
}

// providerGone waits until the deleted provider object is gone: once every call accepted with it ended.
func providerGone(g Gomega, h *th.Harness) {
	g.Eventually(func() bool {
		err := h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: tg.DefaultProviderName}, &tg.ApprovalProvider{})
		return apierrors.IsNotFound(err)
	}).WithTimeout(time.Minute).Should(BeTrue(), "the deleted provider object stayed after its calls ended")
}

// acceptedElsewhere lists the calls that still exist and were accepted with another provider than
// the namespace's or, once it was deleted, the manager's own; byProvider counts the calls of each.
func acceptedElsewhere(ctx context.Context, h *th.Harness, byProvider map[string]int) []string {
	list := &tg.ToolCallList{}
	if err := h.K8s.List(ctx, list, client.InNamespace(h.NS)); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, tc := range list.Items {
		if _, accepted := tc.Annotations[tg.AnnotationExecutionTimeout]; !accepted {
			continue
		}
		got := tc.Annotations[tg.AnnotationProvider]
		byProvider[got]++
		if got != tg.KindApprovalProvider+"/"+tg.DefaultProviderName && got != "" {
			out = append(out, tc.Name+": "+got)
		}
	}
	return out
}
