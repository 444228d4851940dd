//go:build e2e

package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// The chart's namespace-scoped install: the release upgraded with scope.namespaces listing one
// namespace. Acting as the manager's ServiceAccount (impersonated), Secrets and Jobs are within reach
// in the listed namespace and Forbidden in another one and cluster-wide; a ToolCall in the listed
// namespace runs to Succeeded, one in the other is left alone, and a Tool naming a
// ClusterApprovalProvider is not Ready (ClusterProvidersOff). The release is upgraded back to
// config/dev's values at the end, as hack/cluster.sh left it.
func TestChartNamespaceScopedInstall(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	listed, other := newNamespace(t), newNamespace(t)
	helm := newHelm(t, g)
	t.Cleanup(func() { helm.restore(t) })

	helm.upgrade(g, map[string]any{"scope": map[string]any{"namespaces": []any{listed}}})
	waitManagerReady(g)

	// The manager's ServiceAccount, as the apiserver authenticates its Pods.
	cfg := rest.CopyConfig(restConfig)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + systemNamespace + ":toolgate-controller-manager",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + systemNamespace, "system:authenticated"},
	}
	manager, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	g.Expect(err).NotTo(HaveOccurred())

	secretIn := func(ns string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scope-probe"}, StringData: map[string]string{"password": "hunter2"}}
		g.Expect(k8s.Create(ctx, s)).To(Succeed())
		return s
	}
	jobIn := func(ns string) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scope-probe"}, Spec: batchv1.JobSpec{
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "probe", Image: "localhost/toolgate/issue-refund:dev"}}}}}}
	}
	inListed, inOther := secretIn(listed), secretIn(other)
	// The listed namespace: the manager's Role, once the apiserver's authorizer has the upgrade's binding.
	g.Eventually(func(g Gomega) {
		g.Expect(manager.Get(ctx, client.ObjectKeyFromObject(inListed), &corev1.Secret{})).To(Succeed(), "get a Secret in %s", listed)
	}).WithTimeout(stepTimeout).Should(Succeed())
	newSecret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: listed, Name: "scope-created"}}
	g.Expect(manager.Create(ctx, newSecret, client.DryRunAll)).To(Succeed(), "create a Secret in %s", listed)
	g.Expect(manager.Create(ctx, jobIn(listed), client.DryRunAll)).To(Succeed(), "create a Job in %s", listed)

	// Another namespace, and the whole cluster: nothing.
	forbidden := func(err error, what string) {
		g.Expect(err).To(HaveOccurred(), "the manager's ServiceAccount could %s", what)
		g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want Forbidden, got %v", what, err)
	}
	forbidden(manager.Get(ctx, client.ObjectKeyFromObject(inOther), &corev1.Secret{}), "get a Secret in "+other)
	forbidden(manager.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "scope-created"}}, client.DryRunAll), "create a Secret in "+other)
	forbidden(manager.Create(ctx, jobIn(other), client.DryRunAll), "create a Job in "+other)
	forbidden(manager.Get(ctx, client.ObjectKey{Namespace: other, Name: "scope-probe"}, &batchv1.Job{}), "get a Job in "+other)
	forbidden(manager.List(ctx, &batchv1.JobList{}), "list Jobs cluster-wide")
	forbidden(manager.List(ctx, &corev1.PodList{}), "list Pods cluster-wide")
	forbidden(manager.List(ctx, &tg.ToolCallList{}), "list ToolCalls cluster-wide")
	forbidden(manager.List(ctx, &tg.ClusterApprovalProviderList{}), "list ClusterApprovalProviders")
	// In its own namespace: the execution key by name, not the provider credential beside it.
	forbidden(manager.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-provider-credential"}, &corev1.Secret{}),
		"get the provider credential Secret in "+systemNamespace)

	// A call in the listed namespace runs; one in the other namespace, created first, is left alone.
	untouched := sampleToolCall(t, other)
	g.Expect(k8s.Create(ctx, untouched)).To(Succeed())
	createTool(t, g, sampleTool(t, listed))
	tc := submit(t, g, listed)
	decide(g, tc, true, "5m")
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	expectReceipt(g, tc)
	g.Expect(manager.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-execution-key"}, &corev1.Secret{})).To(Succeed(),
		"the manager reads its execution key in %s", systemNamespace)
	get(g, untouched)
	g.Expect(untouched.Status.Phase).To(BeEmpty(), "the manager served a ToolCall in %s, which scope.namespaces does not list", other)
	g.Expect(untouched.Finalizers).To(BeEmpty(), "the manager accepted a ToolCall in %s", other)

	// ClusterApprovalProviders are off: a Tool naming one says so, naming the setting.
	capTool := sampleTool(t, listed)
	capTool.Name, capTool.Spec.ToolName = "cluster-provider-tool", "cluster_provider_tool"
	capTool.Spec.ProviderRef = &tg.ProviderRef{Kind: tg.KindClusterApprovalProvider, Name: "default"}
	g.Expect(k8s.Create(ctx, capTool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(capTool), capTool)).To(Succeed())
		ready := meta.FindStatusCondition(capTool.Status.Conditions, tg.ConditionReady)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(tg.ReasonClusterProvidersOff))
		g.Expect(ready.Message).To(ContainSubstring("scope.namespaces"))
	}).WithTimeout(stepTimeout).WithPolling(time.Second).Should(Succeed())
}
