package installer

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"toolgate.dev/toolgate/test/testenv"
)

// The chart installed by Helm's SDK, as `helm install` installs it, on a real kube-apiserver of the
// version KUBEBUILDER_ASSETS holds: make test runs this on the newest and on the oldest supported
// version. Helm asks the apiserver what it serves, and the chart installs the requester policy at the
// version it serves (v1 from 1.36, v1beta1 on 1.35): a ToolCall created with a forged requester gets
// the user who created it, on every supported version.
func TestChartInstallsOnThisKubernetesVersion(t *testing.T) {
	g := NewWithT(t)
	env := startAPIServer(t, true)
	version, minor := apiserverVersion(t)
	t.Logf("kube-apiserver %s", version)
	g.Expect(minor).To(BeNumerically(">=", testenv.OldestKubernetesMinor), "a Kubernetes version Toolgate supports")

	err := helmInstall(t, env, "toolgate-system")
	g.Expect(err).NotTo(HaveOccurred())

	admin, err := client.New(env.Config, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	wantVersion := "v1"
	if minor < 36 {
		wantVersion = "v1beta1"
	}
	policy := &unstructured.Unstructured{}
	policy.SetGroupVersionKind(schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: wantVersion, Kind: "MutatingAdmissionPolicy"})
	g.Expect(admin.Get(t.Context(), client.ObjectKey{Name: "toolgate-toolcall-requester"}, policy)).To(Succeed())

	// The forged requester is replaced by the one who created the ToolCall, once the apiserver
	// enforces the policy it was just given (it loads policies asynchronously).
	// The creator may do anything (cluster-admin), so the call policy lets the ToolCall through.
	g.Expect(admin.Create(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "creator-is-admin"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "creator@example.com"}}})).To(Succeed())
	creator := impersonating(t, env, "creator@example.com")
	g.Eventually(func(g Gomega) {
		tc := forgedToolCall()
		g.Expect(creator.Create(t.Context(), tc, client.DryRunAll)).To(Succeed())
		user, _, _ := unstructured.NestedString(tc.Object, "spec", "requester", "username")
		g.Expect(user).To(Equal("creator@example.com"))
		groups, _, _ := unstructured.NestedStringSlice(tc.Object, "spec", "requester", "groups")
		g.Expect(groups).NotTo(ContainElement("finance-approvers"))
	}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// On an apiserver that serves no MutatingAdmissionPolicy, the install stops before it creates anything,
// with a message that names what is missing and the value that chooses; nothing is left behind.
func TestChartRefusesAClusterThatCannotRecordTheRequester(t *testing.T) {
	g := NewWithT(t)
	env := startAPIServer(t, false)
	err := helmInstall(t, env, "toolgate-system")
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(And(
		ContainSubstring("Toolgate needs MutatingAdmissionPolicy"),
		ContainSubstring("admissionregistration.k8s.io/v1"),
		ContainSubstring("admissionPolicies.mutatingAPIVersion"),
		ContainSubstring("Nothing was installed")))

	admin, err := client.New(env.Config, client.Options{})
	g.Expect(err).NotTo(HaveOccurred())
	var crds apiextensionsv1.CustomResourceDefinitionList
	g.Expect(admin.List(t.Context(), &crds)).To(Succeed())
	for _, crd := range crds.Items {
		g.Expect(crd.Spec.Group).NotTo(Equal("toolgate.dev"), "the refused install created %s", crd.Name)
	}
}

// Choosing the version by value installs it without asking the cluster; on a cluster that does not serve
// it, the apiserver refuses the object (Helm names it), so the choice is never silently ignored.
func TestChartRendersTheRequesterPolicyAtTheChosenVersion(t *testing.T) {
	for _, tc := range []struct {
		values string
		want   string
	}{
		{`admissionPolicies: {mutatingAPIVersion: v1}`, "admissionregistration.k8s.io/v1"},
		{`admissionPolicies: {mutatingAPIVersion: v1beta1}`, "admissionregistration.k8s.io/v1beta1"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			g := NewWithT(t)
			r := render(t, tc.values)
			var n int
			for _, obj := range r {
				if kind := obj["kind"]; kind == "MutatingAdmissionPolicy" || kind == "MutatingAdmissionPolicyBinding" {
					g.Expect(obj["apiVersion"]).To(Equal(tc.want))
					n++
				}
			}
			g.Expect(n).To(Equal(2))
		})
	}
	_, err := renderChart(t, repoRoot(t), defaultNamespace, map[string]any{"admissionPolicies": map[string]any{"mutatingAPIVersion": "v2"}})
	NewWithT(t).Expect(err).To(MatchError(And(ContainSubstring("/admissionPolicies/mutatingAPIVersion"), ContainSubstring("v1beta1"))))
}

func startAPIServer(t *testing.T, mutatingAdmissionPolicy bool) *envtest.Environment {
	t.Helper()
	logf.SetLogger(logr.Discard())
	env, err := testenv.StartAPIServer(mutatingAdmissionPolicy)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env
}

func apiserverVersion(t *testing.T) (string, int) {
	t.Helper()
	dir, err := testenv.AssetsDir()
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	version, minor, err := testenv.APIServerVersion(dir)
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return version, minor
}

// helmInstall installs dist/chart with its default values as release toolgate into namespace, as
// `helm install --create-namespace` does, with an admin's kubeconfig for env.
func helmInstall(t *testing.T, env *envtest.Environment, namespace string) error {
	t.Helper()
	g := NewWithT(t)
	user, err := env.AddUser(envtest.User{Name: "helm-admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	path := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &path
	flags.Namespace = &namespace

	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	g.Expect(cfg.Init(flags, namespace, "secret")).To(Succeed())
	install := action.NewInstall(cfg)
	install.ReleaseName = "toolgate"
	install.Namespace = namespace
	install.CreateNamespace = true
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Timeout = time.Minute
	chrt, err := loader.Load(filepath.Join(repoRoot(t), "dist", "chart"))
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	_, err = install.RunWithContext(ctx, chrt, map[string]any{})
	return err
}

// impersonating is a client of env acting as user, in group system:authenticated.
func impersonating(t *testing.T, env *envtest.Environment, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{})
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	return c
}

// forgedToolCall names a requester who did not create it.
func forgedToolCall() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "toolgate.dev/v1alpha1",
		"kind":       "ToolCall",
		"metadata":   map[string]any{"namespace": metav1.NamespaceDefault, "generateName": "forged-"},
		"spec": map[string]any{
			"tool":         "issue-refund",
			"arguments":    map[string]any{},
			"waitingLimit": "1m",
			"requester":    map[string]any{"username": "cfo@example.com", "groups": []any{"finance-approvers"}},
		},
	}}
}
