package installer

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"sigs.k8s.io/yaml"

	"toolgate.dev/toolgate/test/testenv"
)

// everyValue sets each value platform teams reach for, together: what `helm lint --strict` checks
// with them is that every template renders valid objects and the schema takes them all at once.
const everyValue = `
commonLabels: {team: platform}
global: {imagePullSecrets: [{name: global-regcred}], commonLabels: {cost-center: "42"}, priorityClassName: platform}
imagePullSecrets: [{name: regcred}]
podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}
containerSecurityContext: {runAsUser: null}
serviceAccount: {create: true, name: gatekeeper, annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::1:role/x"}, automountServiceAccountToken: false}
extraObjects:
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: '{{ .Release.Name }}-extra'}
  data: {a: b}
volumes: [{name: scratch, emptyDir: {}}]
volumeMounts: [{name: scratch, mountPath: /scratch}]
replicaCount: 2
podDisruptionBudget: {enabled: true, maxUnavailable: "50%"}
admissionPolicies: {enabled: true, mutatingAPIVersion: v1}
mcpServers: {executorImage: {repository: registry.example.com/toolgate/mcp-call, tag: v0.1.0}}
metrics:
  serviceMonitor: {enabled: true}
  certificate: {secretName: toolgate-metrics-tls}
scope: {namespaces: [agents, payments]}
mcpGateway:
  enabled: true
  namespace: agents
  callers: [refund-agent]
  replicaCount: 2
  image: {pullPolicy: Always}
  podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}
  serviceAccount: {name: gateway}
  nodeSelector: {kubernetes.io/os: linux}
  tolerations: [{key: dedicated, operator: Equal, value: agents, effect: NoSchedule}]
  priorityClassName: agents
  podAnnotations: {a: b}
  podDisruptionBudget: {enabled: true, minAvailable: 1}
  tls: {certManager: {enabled: true, issuerRef: {name: cluster-ca, kind: ClusterIssuer}}}
`

// The chart passes `helm lint --strict` (Helm's SDK, as the command line runs it) with its defaults,
// with the local cluster's values, and with every value set; a bad value fails it, naming the path.
func TestChartLintsStrict(t *testing.T) {
	root := repoRoot(t)
	dev, err := os.ReadFile(filepath.Join(root, "config", "dev", "values.yaml"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	for _, tc := range []struct {
		name, values, fails string
		minor               int // the Kubernetes version linted against; 0: the newest
	}{
		{name: "defaults"},
		{name: "config/dev/values.yaml", values: string(dev)},
		{name: "every value", values: everyValue},
		{name: "Kubernetes 1.35, the requester policy v1beta1", values: `admissionPolicies: {mutatingAPIVersion: v1beta1}`, minor: testenv.OldestKubernetesMinor},
		{name: "a budget of abc", values: `podDisruptionBudget: {minAvailable: abc}`, fails: "/podDisruptionBudget/minAvailable"},
		{name: "an unknown global", values: `global: {imageRegistry: x}`, fails: "/global"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			values := map[string]any{}
			g.Expect(yaml.Unmarshal([]byte(tc.values), &values)).To(Succeed())
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = "toolgate-system"
			if tc.minor == 0 {
				tc.minor = testenv.NewestKubernetesMinor
			}
			kv, err := common.ParseKubeVersion(fmt.Sprintf("v1.%d.0", tc.minor))
			g.Expect(err).NotTo(HaveOccurred())
			lint.KubeVersion = kv
			result := lint.Run([]string{filepath.Join(root, "dist", "chart")}, values)
			g.Expect(result.TotalChartsLinted).To(Equal(1))
			if tc.fails == "" {
				g.Expect(result.Errors).To(BeEmpty())
				return
			}
			g.Expect(result.Errors).NotTo(BeEmpty())
			var all []string
			for _, err := range result.Errors {
				all = append(all, err.Error())
			}
			g.Expect(strings.Join(all, "\n")).To(ContainSubstring(tc.fails))
		})
	}
}
