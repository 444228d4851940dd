package rbactest_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/test/testenv"
	"toolgate.dev/toolgate/test/testharness"
)

// scopedRelease is the release namespace of the chart installed with scope.namespaces.
const scopedRelease = "toolgate-scoped"

// TestScopedManagerWorksWithItsRoles installs the chart's RBAC with scope.namespaces listing one
// namespace on a real apiserver that authorizes with RBAC, and runs the manager as its ServiceAccount
// with the flags the chart gives it (--namespaces, --cluster-approval-providers=false, leader
// election in the release namespace): a call in the listed namespace is approved and runs to
// Succeeded, a call in another namespace is left alone, a Tool naming a ClusterApprovalProvider is
// not Ready and its call ends Rejected (ClusterProvidersOff), and not one of the manager's requests
// is refused, so its caches list and watch only where its Roles reach.
func TestScopedManagerWorksWithItsRoles(t *testing.T) {
	g := NewWithT(t)
	logf.SetLogger(logr.Discard())
	started, err := testenv.Start()
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := started.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	admin, err := client.New(started.Config, client.Options{Scheme: controllers.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	env := &testharness.Env{Env: started, Config: started.Config, Client: admin}
	ctx := t.Context()

	// The harness's namespace is the one listed; its manager starts below, as the ServiceAccount.
	h := testharness.New(t, env, testharness.WithoutManager())
	const other = "elsewhere-scoped"
	for _, ns := range []string{scopedRelease, other} {
		g.Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	for _, obj := range scopedRBAC(t, h.NS) {
		g.Expect(admin.Create(ctx, obj)).To(Succeed(), "installing %T %s", obj, obj.GetName())
	}
	user, groups := serviceAccountUser(scopedRelease, "toolgate-controller-manager")
	sa, err := env.AddUser(envtest.User{Name: user, Groups: groups})
	g.Expect(err).NotTo(HaveOccurred())
	// Before the manager starts, the authorizer has every binding: what it needs is allowed, so a
	// refusal later is its Roles', not the authorizer catching up.
	for _, need := range []authorizationv1.ResourceAttributes{
		{Namespace: h.NS, Verb: "watch", Group: tg.GroupVersion.Group, Resource: "toolcalls"},
		{Namespace: h.NS, Verb: "create", Group: "batch", Resource: "jobs"},
		{Namespace: scopedRelease, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"},
		{Namespace: scopedRelease, Verb: "get", Resource: "secrets", Name: "toolgate-execution-key"},
	} {
		g.Eventually(func(g Gomega) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &need}}
			g.Expect(admin.Create(ctx, sar)).To(Succeed())
			g.Expect(sar.Status.Allowed).To(BeTrue(), "%+v never authorized: %s", need, sar.Status.Reason)
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	}
	// What the chart's scope denies the manager: anything in another namespace, anything cluster-wide.
	for _, deny := range []authorizationv1.ResourceAttributes{
		{Namespace: other, Verb: "get", Resource: "secrets"},
		{Namespace: other, Verb: "create", Group: "batch", Resource: "jobs"},
		{Verb: "list", Resource: "pods"},
		{Verb: "list", Group: tg.GroupVersion.Group, Resource: "clusterapprovalproviders"},
		{Namespace: scopedRelease, Verb: "get", Resource: "secrets", Name: "toolgate-provider-credential"},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &deny}}
		g.Expect(admin.Create(ctx, sar)).To(Succeed())
		g.Expect(sar.Status.Allowed).To(BeFalse(), "the scoped manager may %+v", deny)
	}

	refused := &refusals{}
	cfg := sa.Config()
	cfg.Wrap(refused.wrap)
	h.Env = &testharness.Env{Env: started, Config: cfg, Client: admin}
	h.Opts.ClusterProvidersOff = true
	h.Opts.LeaderElection, h.Opts.LeaderElectionNamespace = true, scopedRelease
	h.Opts.ClusterResourceNamespace = scopedRelease

	// Created before the manager starts, so that it would be the first call served if the manager's
	// cache reached its namespace.
	elsewhere := h.NewToolCall("elsewhere", "issue_refund", testharness.RefundArgs, 10*time.Minute, nil)
	elsewhere.Namespace = other
	g.Expect(admin.Create(ctx, elsewhere)).To(Succeed())
	h.Start()

	h.Tool("issue-refund", "issue_refund", testharness.RefundSchema)
	h.ToolCall("refund", "issue_refund", testharness.RefundArgs, 10*time.Minute, nil)
	h.ApproveAndFinish("refund", true, `{"refund_id":"rf_1"}`)
	done := h.WaitPhase("refund", tg.PhaseSucceeded)
	g.Expect(done.Status.Result).To(Equal(`{"refund_id":"rf_1"}`))

	g.Expect(admin.Get(ctx, client.ObjectKeyFromObject(elsewhere), elsewhere)).To(Succeed())
	g.Expect(elsewhere.Status.Phase).To(BeEmpty(), "the manager served a ToolCall in %s, which it was not given", other)
	g.Expect(elsewhere.Finalizers).To(BeEmpty(), "the manager accepted a ToolCall in %s", other)

	// A Tool naming a ClusterApprovalProvider: not Ready, its call Rejected, both naming the setting.
	h.Tool("cluster-refund", "cluster_refund", "", testharness.WithProviderRef(tg.KindClusterApprovalProvider, "default"))
	g.Eventually(func(g Gomega) {
		tool := &tg.Tool{}
		g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: "cluster-refund"}, tool)).To(Succeed())
		ready := meta.FindStatusCondition(tool.Status.Conditions, tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(tg.ReasonClusterProvidersOff))
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Message).To(ContainSubstring("--cluster-approval-providers=false, the chart's scope.namespaces"))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	h.ToolCall("cluster-call", "cluster_refund", `{}`, 10*time.Minute, nil)
	rejected := h.WaitPhase("cluster-call", tg.PhaseRejected)
	g.Expect(rejected.Status.Reason).To(Equal(tg.ReasonClusterProvidersOff))
	g.Expect(rejected.Status.Message).To(ContainSubstring("ClusterApprovalProvider default"))
	g.Expect(rejected.Status.Message).To(ContainSubstring("scope.namespaces"))

	// The execution key was made in the release namespace, with the manager's own rights there.
	g.Expect(admin.Get(ctx, types.NamespacedName{Namespace: scopedRelease, Name: "toolgate-execution-key"}, &corev1.Secret{})).To(Succeed())
	h.StopManager()
	g.Expect(refused.list()).To(BeEmpty(), "the scoped manager made requests its Roles refuse")
}

// scopedRBAC is the RBAC of the chart installed in scopedRelease with scope.namespaces [ns]: its
// ServiceAccounts, Roles, ClusterRoles and their bindings, as Helm renders them.
func scopedRBAC(t *testing.T, ns string) []client.Object {
	t.Helper()
	g := NewWithT(t)
	root, err := testenv.RepoRoot()
	g.Expect(err).NotTo(HaveOccurred())
	chrt, err := loader.Load(filepath.Join(root, "dist", "chart"))
	g.Expect(err).NotTo(HaveOccurred())
	// Helm's defaults (no cluster asked) name no MutatingAdmissionPolicy: the version is chosen here.
	values := map[string]any{"scope": map[string]any{"namespaces": []any{ns}},
		"admissionPolicies": map[string]any{"mutatingAPIVersion": "v1"}}
	rv, err := chartutil.ToRenderValues(chrt, values, common.ReleaseOptions{Name: "toolgate", Namespace: scopedRelease, IsInstall: true}, common.DefaultCapabilities)
	g.Expect(err).NotTo(HaveOccurred())
	rendered, err := engine.Render(chrt, rv)
	g.Expect(err).NotTo(HaveOccurred())
	var out []client.Object
	for name, text := range rendered {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range documentSeparator.Split(text, -1) {
			var tm metav1.TypeMeta
			g.Expect(yaml.Unmarshal([]byte(doc), &tm)).To(Succeed(), name)
			var obj client.Object
			switch tm.Kind {
			case "ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "Role":
				obj = &rbacv1.Role{}
			case "RoleBinding":
				obj = &rbacv1.RoleBinding{}
			case "ClusterRole":
				obj = &rbacv1.ClusterRole{}
			case "ClusterRoleBinding":
				obj = &rbacv1.ClusterRoleBinding{}
			default:
				continue
			}
			g.Expect(yaml.UnmarshalStrict([]byte(doc), obj)).To(Succeed(), name)
			out = append(out, obj)
		}
	}
	g.Expect(out).NotTo(BeEmpty())
	return out
}

// refusals records every request the apiserver answered 403 Forbidden.
type refusals struct {
	mu   sync.Mutex
	seen []string
}

func (r *refusals) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusForbidden {
			r.mu.Lock()
			r.seen = append(r.seen, fmt.Sprintf("%s %s", req.Method, req.URL.Path))
			r.mu.Unlock()
		}
		return resp, err
	})
}

func (r *refusals) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
