//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The manager's namespace enforces the restricted Pod Security Standard, Pod Security admission is
// on (it refuses a Pod without the restricted securityContext there), and it admitted the manager,
// which runs and is ready.
func TestManagerRunsUnderRestrictedPodSecurity(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: systemNamespace}, ns)).To(Succeed())
	g.Expect(ns.Labels).To(HaveKeyWithValue("pod-security.kubernetes.io/enforce", "restricted"))

	unrestricted := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "unrestricted-probe", Namespace: systemNamespace},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "probe", Image: "localhost/toolgate/issue-refund:dev"}}},
	}
	err := k8s.Create(ctx, unrestricted, client.DryRunAll)
	g.Expect(err).To(MatchError(ContainSubstring(`violates PodSecurity "restricted:latest"`)))

	waitManagerReady(g)
	for _, p := range managerPods(g) {
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning))
		g.Expect(p.Spec.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()))
		g.Expect(p.Spec.Containers[0].Image).To(Equal("localhost/toolgate/toolgate:dev"))
	}
}

// /metrics is served over HTTPS to callers the apiserver authenticates and authorizes: no token is
// 401, a ServiceAccount without the toolgate-metrics-reader ClusterRole is 403, one with it reads the
// metrics.
func TestMetricsNeedAnAuthorizedToken(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cs, err := kubernetes.NewForConfig(restConfig)
	g.Expect(err).NotTo(HaveOccurred())

	svc := &corev1.Service{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-controller-manager-metrics-service"}, svc)).To(Succeed())
	url := fmt.Sprintf("https://%s:8443/metrics", svc.Spec.ClusterIP)

	token := func(sa string) string {
		g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}})).To(Succeed())
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
		}, metav1.CreateOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		return tr.Status.Token
	}
	reader, stranger := token("metrics-reader"), token("stranger")
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "metrics-reader", Namespace: ns}},
	}
	g.Expect(k8s.Create(ctx, binding)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), binding) })

	// The manager serves a self-signed certificate; what is checked here is who may read.
	httpc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec
	scrape := func(g Gomega, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		g.Expect(err).NotTo(HaveOccurred())
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := httpc.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		return resp.StatusCode, string(body)
	}
	g.Eventually(func(g Gomega) {
		code, body := scrape(g, reader)
		g.Expect(code).To(Equal(http.StatusOK), body)
		g.Expect(body).To(ContainSubstring("controller_runtime_reconcile_total"))
	}).WithTimeout(stepTimeout).Should(Succeed())
	code, _ := scrape(g, "")
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	code, _ = scrape(g, stranger)
	g.Expect(code).To(Equal(http.StatusForbidden))
}
