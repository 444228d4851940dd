package apivalidation_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

func validProviderSpec() tg.ApprovalProviderSpec {
	return tg.ApprovalProviderSpec{
		URL:                 "https://approvals.example.com/api/aap",
		CredentialSecretRef: &tg.SecretKeyRef{Name: "approvals-credential"},
	}
}

// What ApprovalProvider and ClusterApprovalProvider accept and refuse, each refusal naming the
// field and the fix.
func TestProviderValidation(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*tg.ApprovalProviderSpec)
		field  string // "" when accepted
		text   string
	}{
		{name: "https with a path", mutate: func(*tg.ApprovalProviderSpec) {}},
		{name: "http for a development provider", mutate: func(s *tg.ApprovalProviderSpec) {
			s.URL, s.AllowInsecureHTTP = "http://reference-provider.toolgate-system.svc:8085", true
		}},
		{name: "http without allowInsecureHTTP", mutate: func(s *tg.ApprovalProviderSpec) { s.URL = "http://approvals.example.com" },
			field: "spec", text: "spec.url must be an https:// URL; an http:// URL is accepted only with spec.allowInsecureHTTP: true"},
		{name: "not a URL", mutate: func(s *tg.ApprovalProviderSpec) { s.URL = "approvals.example.com/api" },
			field: "spec.url", text: "spec.url must be an absolute http(s) URL"},
		{name: "user information", mutate: func(s *tg.ApprovalProviderSpec) { s.URL = "https://user:pw@approvals.example.com" },
			field: "spec.url", text: "without user information, query or fragment"},
		{name: "a query", mutate: func(s *tg.ApprovalProviderSpec) { s.URL = "https://approvals.example.com/?token=x" },
			field: "spec.url", text: "without user information, query or fragment"},
		{name: "both CA fields", mutate: func(s *tg.ApprovalProviderSpec) {
			s.CABundle = []byte("pem")
			s.CABundleRef = &tg.CABundleRef{Kind: "ConfigMap", Name: "ca"}
		}, field: "spec", text: "set at most one of spec.caBundle or spec.caBundleRef"},
		{name: "a CA bundle in a Secret", mutate: func(s *tg.ApprovalProviderSpec) { s.CABundleRef = &tg.CABundleRef{Kind: "Secret", Name: "ca"} }},
		{name: "a CA bundle in something else", mutate: func(s *tg.ApprovalProviderSpec) { s.CABundleRef = &tg.CABundleRef{Kind: "Pod", Name: "ca"} },
			field: "spec.caBundleRef.kind", text: "Unsupported value"},
		{name: "provisioning", mutate: func(s *tg.ApprovalProviderSpec) {
			s.CredentialSecretRef = nil
			s.Provisioning = &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "provisioner"}}
		}},
		{name: "a credential and provisioning", mutate: func(s *tg.ApprovalProviderSpec) {
			s.Provisioning = &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "provisioner"}}
		}, field: "spec", text: "set exactly one of spec.credentialSecretRef"},
		{name: "neither a credential nor provisioning", mutate: func(s *tg.ApprovalProviderSpec) { s.CredentialSecretRef = nil },
			field: "spec", text: "set exactly one of spec.credentialSecretRef"},
		{name: "no credential Secret name", mutate: func(s *tg.ApprovalProviderSpec) { s.CredentialSecretRef.Name = "" },
			field: "spec.credentialSecretRef.name", text: "should be at least 1 chars long"},
	}
	ns := newNamespace(t)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := validProviderSpec()
			tc.mutate(&spec)
			name := "p" + string(rune('a'+i))
			for _, obj := range []tg.GenericProvider{
				&tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec},
				&tg.ClusterApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name}, Spec: spec},
			} {
				err := k8s.Create(context.Background(), obj)
				if tc.field == "" {
					g.Expect(err).NotTo(HaveOccurred())
					if ref := obj.GetSpec().CredentialSecretRef; ref != nil {
						g.Expect(ref.Key).To(Equal("token"), "the key defaults to token")
					} else {
						g.Expect(obj.GetSpec().Provisioning.ProvisionerTokenSecretRef.Key).To(Equal("token"))
					}
					if ref := obj.GetSpec().CABundleRef; ref != nil {
						g.Expect(ref.Key).To(Equal("ca.crt"))
					}
					g.Expect(k8s.Delete(context.Background(), obj)).To(Succeed())
					continue
				}
				expectRefused(g, err, tc.field, tc.text)
			}
		})
	}
}

// A Tool's providerRef names a kind of provider the manager knows.
func TestToolProviderRefKind(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	tool := validTool(ns, "named")
	tool.Spec.ProviderRef = &tg.ProviderRef{Kind: tg.KindClusterApprovalProvider, Name: "shared"}
	g.Expect(k8s.Create(context.Background(), tool)).To(Succeed())
	bad := validTool(ns, "wrong-kind")
	bad.Spec.ProviderRef = &tg.ProviderRef{Kind: "Issuer", Name: "shared"}
	expectRefused(g, k8s.Create(context.Background(), bad), "spec.providerRef.kind", "Unsupported value")
}

// The instance belongs to the object that provisioned it: provisioning cannot be added, removed or
// changed.
func TestProvisioningIsFixed(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	ap := &tg.ApprovalProvider{ObjectMeta: metav1.ObjectMeta{Name: "own", Namespace: ns}, Spec: tg.ApprovalProviderSpec{
		URL: "https://approvals.example.com", Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "provisioner"}},
	}}
	g.Expect(k8s.Create(context.Background(), ap)).To(Succeed())
	renamed := ap.DeepCopy()
	renamed.Spec.Provisioning.InstanceName = "another"
	expectRefused(g, k8s.Update(context.Background(), renamed), "spec.provisioning", "spec.provisioning is immutable")
	removed := ap.DeepCopy()
	removed.Spec.Provisioning, removed.Spec.CredentialSecretRef = nil, &tg.SecretKeyRef{Name: "issued"}
	expectRefused(g, k8s.Update(context.Background(), removed), "spec", "spec.provisioning cannot be added or removed")
	moved := ap.DeepCopy()
	moved.Spec.URL = "https://approvals.example.org"
	g.Expect(k8s.Update(context.Background(), moved)).To(Succeed(), "the rest of the spec may change")
}
