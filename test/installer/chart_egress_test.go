package installer

import (
	"testing"

	. "github.com/onsi/gomega"
	networkingv1 "k8s.io/api/networking/v1"
)

// The manager's NetworkPolicy leaves its egress open unless networkPolicy.egress.enabled: then only
// DNS (allowDNS) and the listed rules, so that an MCPServer cannot make the manager dial anything
// else. A value the schema does not know is refused.
func TestChartNetworkPolicyEgress(t *testing.T) {
	key := "NetworkPolicy " + release + "/toolgate-controller-manager"

	t.Run("off by default", func(t *testing.T) {
		g := NewWithT(t)
		np := as[networkingv1.NetworkPolicy](g, render(t, `networkPolicy: {enabled: true}`), key)
		g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
		g.Expect(np.Spec.Egress).To(BeEmpty())
	})

	t.Run("restricted", func(t *testing.T) {
		g := NewWithT(t)
		np := as[networkingv1.NetworkPolicy](g, render(t, `networkPolicy: {enabled: true, egress: {enabled: true, rules: [
			{to: [{ipBlock: {cidr: 10.96.0.1/32}}], ports: [{port: 443, protocol: TCP}]},
			{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: mcp}}}]}]}}`), key)
		g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		g.Expect(np.Spec.Egress).To(HaveLen(3))
		g.Expect(np.Spec.Egress[0].To).To(BeEmpty(), "DNS, wherever the cluster's resolver is")
		g.Expect(np.Spec.Egress[0].Ports).To(HaveLen(2))
		g.Expect(np.Spec.Egress[0].Ports[0].Port.IntValue()).To(Equal(53))
		g.Expect(np.Spec.Egress[1].To[0].IPBlock.CIDR).To(Equal("10.96.0.1/32"))
		g.Expect(np.Spec.Egress[2].To[0].NamespaceSelector.MatchLabels).To(HaveKeyWithValue("kubernetes.io/metadata.name", "mcp"))
		g.Expect(np.Spec.Ingress).NotTo(BeEmpty(), "ingress rules stay")
	})

	t.Run("without DNS", func(t *testing.T) {
		g := NewWithT(t)
		np := as[networkingv1.NetworkPolicy](g, render(t, `networkPolicy: {enabled: true, egress: {enabled: true, allowDNS: false}}`), key)
		g.Expect(np.Spec.PolicyTypes).To(ContainElement(networkingv1.PolicyTypeEgress))
		g.Expect(np.Spec.Egress).To(BeEmpty(), "no egress at all: the manager reaches nothing")
	})

	t.Run("schema", func(t *testing.T) {
		g := NewWithT(t)
		_, err := renderWith(t, `networkPolicy: {enabled: true, egress: {enabled: true, destinations: []}}`)
		g.Expect(err).To(MatchError(ContainSubstring("destinations")))
		_, err = renderWith(t, `networkPolicy: {egress: {rules: [{from: []}]}}`)
		g.Expect(err).To(MatchError(ContainSubstring("from")))
	})
}
