package docs_test

import (
	"testing"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// The NetworkPolicy docs/mcp-servers.md recommends in front of an MCP server admits the calls' Pods
// of the tools' namespace and the manager's Pods (discovery and the listening session), names each
// namespace by the label the apiserver sets, and admits nothing else; the text says the call label is
// trustworthy only with toolgate-execution-records.
func TestMCPServerNetworkPolicyAdmitsTheCallsAndTheManager(t *testing.T) {
	g := NewWithT(t)
	np := &networkingv1.NetworkPolicy{}
	g.Expect(yaml.UnmarshalStrict([]byte(codeBlockContaining(t, "docs/mcp-servers.md", "kind: NetworkPolicy")), np)).To(Succeed())
	g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
	g.Expect(np.Spec.Ingress).To(HaveLen(1))
	peers := np.Spec.Ingress[0].From
	g.Expect(peers).To(HaveLen(2))

	admits := func(ns string, pod map[string]string) bool {
		for _, p := range peers {
			g.Expect(p.NamespaceSelector).NotTo(BeNil(), "every peer names its namespace")
			g.Expect(p.PodSelector).NotTo(BeNil(), "every peer names its Pods")
			nsSel, err := metav1.LabelSelectorAsSelector(p.NamespaceSelector)
			g.Expect(err).NotTo(HaveOccurred())
			podSel, err := metav1.LabelSelectorAsSelector(p.PodSelector)
			g.Expect(err).NotTo(HaveOccurred())
			if nsSel.Matches(labels.Set{"kubernetes.io/metadata.name": ns}) && podSel.Matches(labels.Set(pod)) {
				return true
			}
		}
		return false
	}
	g.Expect(admits("payments", map[string]string{"toolgate.dev/toolcall-uid": "3f1c", "batch.kubernetes.io/job-name": "refund-1a2b"})).To(BeTrue(), "a call's Pod")
	g.Expect(admits("toolgate-system", map[string]string{"control-plane": "controller-manager", "app.kubernetes.io/name": "toolgate"})).To(BeTrue(), "the manager")
	g.Expect(admits("payments", map[string]string{"app": "agent"})).To(BeFalse(), "an agent")
	g.Expect(admits("elsewhere", map[string]string{"toolgate.dev/toolcall-uid": "3f1c"})).To(BeFalse(), "a labelled Pod of another namespace")
	g.Expect(admits("toolgate-system", map[string]string{"app.kubernetes.io/name": "toolgate-mcp"})).To(BeFalse(), "the MCP gateway")

	g.Expect(readFile(t, "docs/mcp-servers.md")).To(ContainSubstring("The label is trustworthy only with the admission policy `toolgate-execution-records`"))
}
