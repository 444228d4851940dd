package installer

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const gateway = "Deployment " + release + "/toolgate-mcp"

// gatewayOn switches the gateway on for a namespace other than the release's.
const gatewayOn = `mcpGateway: {enabled: true, namespace: payments}`

// The values platform teams know from cert-manager's chart: security contexts, ServiceAccounts,
// commonLabels, global, extra volumes and objects, the gateway's scheduling, disruption budget and
// cert-manager certificate, the ServiceMonitor's authorization and TLS.
func TestChartParityValues(t *testing.T) {
	t.Run("security contexts: restricted by default, OpenShift's UID when the IDs are removed", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, gatewayOn)
		for _, key := range []string{manager, gateway} {
			s := as[appsv1.Deployment](g, r, key).Spec.Template.Spec
			g.Expect(s.SecurityContext.RunAsNonRoot).To(Equal(ptr.To(true)), key)
			g.Expect(s.SecurityContext.RunAsUser).To(Equal(ptr.To[int64](65532)), key)
			g.Expect(s.SecurityContext.FSGroup).To(Equal(ptr.To[int64](65532)), key)
			g.Expect(s.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault), key)
			c := s.Containers[0].SecurityContext
			g.Expect(c.AllowPrivilegeEscalation).To(Equal(ptr.To(false)), key)
			g.Expect(c.ReadOnlyRootFilesystem).To(Equal(ptr.To(true)), key)
			g.Expect(c.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}), key)
		}

		openShift := render(t, `
podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null}
mcpGateway: {enabled: true, namespace: payments, podSecurityContext: {runAsUser: null, runAsGroup: null, fsGroup: null},
  containerSecurityContext: {runAsUser: 1000700000}}`)
		for _, key := range []string{manager, gateway} {
			s := as[appsv1.Deployment](g, openShift, key).Spec.Template.Spec
			g.Expect(s.SecurityContext.RunAsUser).To(BeNil(), "%s: the SCC assigns the UID", key)
			g.Expect(s.SecurityContext.RunAsGroup).To(BeNil(), key)
			g.Expect(s.SecurityContext.FSGroup).To(BeNil(), key)
			g.Expect(s.SecurityContext.RunAsNonRoot).To(Equal(ptr.To(true)), key)
			g.Expect(s.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault), key)
			g.Expect(s.Containers[0].SecurityContext.Capabilities.Drop).To(Equal([]corev1.Capability{"ALL"}), key)
		}
		g.Expect(as[appsv1.Deployment](g, openShift, gateway).Spec.Template.Spec.Containers[0].SecurityContext.RunAsUser).To(Equal(ptr.To[int64](1000700000)))
	})

	t.Run("commonLabels and global.commonLabels on every object and Pod", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
global: {commonLabels: {team: from-global, cost-center: "42"}}
commonLabels: {team: platform}
replicaCount: 2
receiver: {enabled: true, tls: {certManager: {enabled: true, issuerRef: {name: ca}}}}
networkPolicy: {enabled: true}
metrics: {serviceMonitor: {enabled: true, tlsConfig: {insecureSkipVerify: true}}, prometheusRule: {enabled: true}, dashboard: {enabled: true}}
mcpGateway: {enabled: true, namespace: payments, replicaCount: 2, tls: {certManager: {enabled: true, issuerRef: {name: ca}}}}`)
		kinds := r.kinds()
		for _, k := range []string{"CustomResourceDefinition", "ClusterRole", "ValidatingAdmissionPolicy", "PodDisruptionBudget", "Certificate", "ServiceMonitor", "Secret"} {
			g.Expect(kinds).To(HaveKey(k), "every kind is rendered")
		}
		for key, obj := range r {
			l := obj["metadata"].(map[string]any)["labels"]
			g.Expect(l).To(HaveKeyWithValue("team", "platform"), "%s: commonLabels wins over global.commonLabels", key)
			g.Expect(l).To(HaveKeyWithValue("cost-center", "42"), key)
			g.Expect(l).To(HaveKeyWithValue("app.kubernetes.io/instance", "toolgate"), key)
		}
		for _, key := range []string{manager, gateway} {
			d := as[appsv1.Deployment](g, r, key)
			g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("team", "platform"), key)
			g.Expect(selects(g, d.Spec.Selector, d.Spec.Template.Labels)).To(BeTrue(), key)
		}
	})

	t.Run("serviceAccount: name, create, annotations, token; the bindings and policies follow", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
serviceAccount: {name: toolgate-manager, annotations: {eks.amazonaws.com/role-arn: "arn:aws:iam::1:role/x"}, automountServiceAccountToken: false}
mcpGateway: {enabled: true, namespace: payments, serviceAccount: {name: mcp-gw, annotations: {a: b}}}`)
		sa := as[corev1.ServiceAccount](g, r, "ServiceAccount "+release+"/toolgate-manager")
		g.Expect(sa.Annotations).To(HaveKeyWithValue("eks.amazonaws.com/role-arn", "arn:aws:iam::1:role/x"))
		g.Expect(sa.AutomountServiceAccountToken).To(Equal(ptr.To(false)))
		g.Expect(r).NotTo(HaveKey("ServiceAccount " + release + "/toolgate-controller-manager"))
		d := as[appsv1.Deployment](g, r, manager)
		g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal("toolgate-manager"))
		g.Expect(d.Spec.Template.Spec.AutomountServiceAccountToken).To(Equal(ptr.To(true)), "the manager needs its token")
		managerSA := rbacv1.Subject{Kind: "ServiceAccount", Name: "toolgate-manager", Namespace: release}
		g.Expect(as[rbacv1.ClusterRoleBinding](g, r, "ClusterRoleBinding /toolgate-manager-rolebinding").Subjects).To(ConsistOf(managerSA))
		g.Expect(as[rbacv1.ClusterRoleBinding](g, r, "ClusterRoleBinding /toolgate-metrics-auth-rolebinding").Subjects).To(ConsistOf(managerSA))
		g.Expect(as[rbacv1.RoleBinding](g, r, "RoleBinding "+release+"/toolgate-leader-election-rolebinding").Subjects).To(ConsistOf(managerSA))
		for _, name := range []string{"toolgate-toolcall-writers", "toolgate-execution-records"} {
			b, err := json.Marshal(r["ValidatingAdmissionPolicy /"+name])
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(string(b)).To(ContainSubstring(`'toolgate-manager'`), "%s recognises the manager by its ServiceAccount", name)
			g.Expect(string(b)).NotTo(ContainSubstring("toolgate-controller-manager"), name)
		}

		gwSA := as[corev1.ServiceAccount](g, r, "ServiceAccount "+release+"/mcp-gw")
		g.Expect(gwSA.Annotations).To(HaveKeyWithValue("a", "b"))
		g.Expect(gwSA.AutomountServiceAccountToken).To(BeNil(), "true: Kubernetes' default")
		g.Expect(as[appsv1.Deployment](g, r, gateway).Spec.Template.Spec.ServiceAccountName).To(Equal("mcp-gw"))
		gatewaySA := rbacv1.Subject{Kind: "ServiceAccount", Name: "mcp-gw", Namespace: release}
		g.Expect(as[rbacv1.RoleBinding](g, r, "RoleBinding payments/toolgate-mcp-"+release).Subjects).To(ConsistOf(gatewaySA))
		g.Expect(as[rbacv1.RoleBinding](g, r, "RoleBinding payments/toolgate-mcp-"+release+"-impersonator").Subjects).To(ConsistOf(gatewaySA))
		g.Expect(as[rbacv1.ClusterRoleBinding](g, r, "ClusterRoleBinding /toolgate-mcp-"+release+"-authenticator").Subjects).To(ConsistOf(gatewaySA))

		existing := render(t, `
serviceAccount: {create: false, name: platform-toolgate}
mcpGateway: {enabled: true, namespace: payments, serviceAccount: {create: false, name: platform-mcp}}`)
		g.Expect(existing.kinds()).NotTo(HaveKey("ServiceAccount"), "create: false makes none")
		g.Expect(as[appsv1.Deployment](g, existing, manager).Spec.Template.Spec.ServiceAccountName).To(Equal("platform-toolgate"))
		g.Expect(as[rbacv1.ClusterRoleBinding](g, existing, "ClusterRoleBinding /toolgate-manager-rolebinding").Subjects[0].Name).To(Equal("platform-toolgate"))
		g.Expect(as[rbacv1.RoleBinding](g, existing, "RoleBinding payments/toolgate-mcp-"+release).Subjects[0].Name).To(Equal("platform-mcp"))

		// The gateway never acts as the manager or itself, whatever their names.
		for values, want := range map[string]string{
			`{serviceAccount: {name: mgr}, mcpGateway: {enabled: true, callers: [mgr]}}`:                        "mcpGateway.callers names mgr, a ServiceAccount of this release in its namespace " + release + " (the manager's)",
			`{mcpGateway: {enabled: true, callers: [gw], serviceAccount: {name: gw}}}`:                          "mcpGateway.callers names gw, a ServiceAccount of this release in its namespace " + release + " (the gateway's own)",
			`{serviceAccount: {create: false, name: mgr}, mcpGateway: {enabled: true, callers: [refund, mgr]}}`: "(the manager's)",
		} {
			_, err := renderWith(t, values)
			g.Expect(err).To(MatchError(ContainSubstring(want)), values)
		}
	})

	t.Run("extraObjects, volumes and volumeMounts", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
extraObjects:
- |
  apiVersion: v1
  kind: ConfigMap
  metadata: {name: extra-{{ .Release.Name }}, namespace: "{{ .Release.Namespace }}"}
- apiVersion: v1
  kind: Secret
  metadata: {name: extra-secret, namespace: "{{ .Release.Namespace }}"}
volumes: [{name: ca, configMap: {name: corp-ca}}]
volumeMounts: [{name: ca, mountPath: /etc/ssl/corp, readOnly: true}]
mcpGateway: {enabled: true, namespace: payments, tls: {secretName: mcp-tls}, volumes: [{name: scratch, emptyDir: {}}], volumeMounts: [{name: scratch, mountPath: /scratch}]}`)
		g.Expect(r).To(HaveKey("ConfigMap "+release+"/extra-toolgate"), "a string is rendered with tpl")
		g.Expect(r).To(HaveKey("Secret "+release+"/extra-secret"), "an object too")
		d, c := managerContainer(g, r)
		g.Expect(volume(g, d, "ca").ConfigMap.Name).To(Equal("corp-ca"))
		g.Expect(volume(g, d, "tmp").EmptyDir).NotTo(BeNil(), "the chart's own volumes stay")
		g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "ca", MountPath: "/etc/ssl/corp", ReadOnly: true}))
		gw := as[appsv1.Deployment](g, r, gateway)
		g.Expect(volume(g, gw, "scratch").EmptyDir).NotTo(BeNil())
		g.Expect(volume(g, gw, "mcp-tls").Secret.SecretName).To(Equal("mcp-tls"))
		g.Expect(gw.Spec.Template.Spec.Containers[0].VolumeMounts).To(ContainElements(
			corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"}, HaveField("Name", "mcp-tls")))
	})

	t.Run("global: imagePullSecrets, priorityClassName; nothing else", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
global: {imagePullSecrets: [{name: shared}], priorityClassName: platform-critical}
imagePullSecrets: [{name: own}]
mcpGateway: {enabled: true, namespace: payments, priorityClassName: agents}`)
		m := as[appsv1.Deployment](g, r, manager).Spec.Template.Spec
		g.Expect(m.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "shared"}, {Name: "own"}}))
		g.Expect(m.PriorityClassName).To(Equal("platform-critical"), "global.priorityClassName when priorityClassName is empty")
		gw := as[appsv1.Deployment](g, r, gateway).Spec.Template.Spec
		g.Expect(gw.ImagePullSecrets).To(Equal(m.ImagePullSecrets))
		g.Expect(gw.PriorityClassName).To(Equal("agents"))
		g.Expect(as[appsv1.Deployment](g, render(t, `{global: {priorityClassName: p}, priorityClassName: own}`), manager).Spec.Template.Spec.PriorityClassName).To(Equal("own"))
		_, err := renderWith(t, `global: {}`)
		g.Expect(err).NotTo(HaveOccurred(), "Helm's own global: {}")
	})

	t.Run("the gateway's image, scheduling and disruption budget", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
nodeSelector: {pool: system}
mcpGateway:
  enabled: true
  namespace: payments
  replicaCount: 3
  image: {pullPolicy: Always}
  nodeSelector: {pool: agents}
  tolerations: [{key: agents, operator: Exists}]
  affinity: {podAntiAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1, podAffinityTerm: {topologyKey: kubernetes.io/hostname}}]}}
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: ScheduleAnyway}]
  podAnnotations: {example.com/a: b}
  podLabels: {team: agents}
  podDisruptionBudget: {maxUnavailable: "50%"}`)
		d := as[appsv1.Deployment](g, r, gateway)
		s := d.Spec.Template.Spec
		g.Expect(s.Containers[0].ImagePullPolicy).To(Equal(corev1.PullAlways))
		g.Expect(s.NodeSelector).To(Equal(map[string]string{"pool": "agents"}), "the gateway's own, not the manager's")
		g.Expect(s.Tolerations).To(HaveLen(1))
		g.Expect(s.Affinity.PodAntiAffinity).NotTo(BeNil())
		g.Expect(s.TopologySpreadConstraints).To(HaveLen(1))
		g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue("example.com/a", "b"))
		g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("team", "agents"))
		g.Expect(selects(g, d.Spec.Selector, d.Spec.Template.Labels)).To(BeTrue())
		pdb := as[policyv1.PodDisruptionBudget](g, r, "PodDisruptionBudget "+release+"/toolgate-mcp")
		g.Expect(pdb.Spec.MaxUnavailable.String()).To(Equal("50%"))
		g.Expect(pdb.Spec.MinAvailable).To(BeNil())
		g.Expect(selects(g, pdb.Spec.Selector, d.Spec.Template.Labels)).To(BeTrue())
		g.Expect(selects(g, pdb.Spec.Selector, as[appsv1.Deployment](g, r, manager).Spec.Template.Labels)).To(BeFalse())

		g.Expect(render(t, gatewayOn)).NotTo(HaveKey("PodDisruptionBudget "+release+"/toolgate-mcp"), "one replica: no budget that blocks drains")
		g.Expect(as[appsv1.Deployment](g, render(t, gatewayOn), gateway).Spec.Template.Spec.Containers[0].ImagePullPolicy).To(Equal(corev1.PullIfNotPresent))
		mgr := as[policyv1.PodDisruptionBudget](g, render(t, `{replicaCount: 4, podDisruptionBudget: {minAvailable: "75%"}}`), "PodDisruptionBudget "+release+"/toolgate-controller-manager")
		g.Expect(mgr.Spec.MinAvailable.String()).To(Equal("75%"))
	})

	t.Run("the gateway's certificate from cert-manager", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `mcpGateway: {enabled: true, namespace: payments, tls: {certManager: {enabled: true, issuerRef: {name: internal-ca, kind: ClusterIssuer}, duration: 2160h}}}`)
		cert := r["Certificate "+release+"/toolgate-mcp"]
		g.Expect(cert).NotTo(BeNil())
		spec := cert["spec"].(map[string]any)
		g.Expect(spec["secretName"]).To(Equal("toolgate-mcp-tls"))
		g.Expect(spec["duration"]).To(Equal("2160h"))
		g.Expect(spec["dnsNames"]).To(ContainElement("toolgate-mcp." + release + ".svc"))
		g.Expect(spec["issuerRef"]).To(Equal(map[string]any{"name": "internal-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}))
		gw := as[appsv1.Deployment](g, r, gateway)
		g.Expect(volume(g, gw, "mcp-tls").Secret.SecretName).To(Equal("toolgate-mcp-tls"), "the gateway serves the Certificate's Secret")
		g.Expect(gw.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--url=https://toolgate-mcp."+release+".svc:8090/mcp", "--tls-cert-file=/var/run/toolgate/mcp-tls/tls.crt"))

		named := render(t, `mcpGateway: {enabled: true, namespace: payments, tls: {secretName: gw-tls, certManager: {enabled: true, issuerRef: {name: ca}}}}`)
		g.Expect(named["Certificate "+release+"/toolgate-mcp"]["spec"]).To(HaveKeyWithValue("secretName", "gw-tls"))
		g.Expect(volume(g, as[appsv1.Deployment](g, named, gateway), "mcp-tls").Secret.SecretName).To(Equal("gw-tls"))
		g.Expect(render(t, `mcpGateway: {enabled: true, namespace: payments, tls: {secretName: gw-tls}}`).kinds()).NotTo(HaveKey("Certificate"))

		_, err := renderWith(t, `mcpGateway: {enabled: true, namespace: payments, tls: {certManager: {enabled: true}}}`)
		g.Expect(err).To(MatchError(ContainSubstring("mcpGateway.tls.certManager.issuerRef: name the cert-manager Issuer")))
	})

	t.Run("NOTES says the gateway serves plain HTTP and how to turn TLS on", func(t *testing.T) {
		g := NewWithT(t)
		plain := notes(t, gatewayOn)
		g.Expect(plain).To(ContainSubstring("docs/approval-providers.md).\n\nThe MCP gateway serves"), "a paragraph of its own")
		g.Expect(plain).To(ContainSubstring("http://toolgate-mcp." + release + ".svc:8090/mcp"))
		g.Expect(plain).To(ContainSubstring("It serves plain HTTP"))
		g.Expect(plain).To(ContainSubstring("in the clear"))
		g.Expect(plain).To(ContainSubstring("mcpGateway.tls.secretName"))
		g.Expect(plain).To(ContainSubstring("mcpGateway.tls.certManager.enabled=true"))
		tls := notes(t, `mcpGateway: {enabled: true, namespace: payments, tls: {certManager: {enabled: true, issuerRef: {name: ca}}}}`)
		g.Expect(tls).To(ContainSubstring("https://toolgate-mcp." + release + ".svc:8090/mcp"))
		g.Expect(tls).NotTo(ContainSubstring("plain HTTP"))
	})

	t.Run("the ServiceMonitor presents a token and verifies the certificate", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `metrics: {certificate: {secretName: metrics-tls}, serviceMonitor: {enabled: true}}`)
		ep := serviceMonitorEndpoint(g, r)
		g.Expect(ep).NotTo(HaveKey("bearerTokenFile"))
		g.Expect(ep["authorization"]).To(Equal(map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "toolgate-metrics-scraper-token", "key": "token"}}))
		g.Expect(ep["tlsConfig"]).To(Equal(map[string]any{
			"ca":         map[string]any{"secret": map[string]any{"name": "metrics-tls", "key": "ca.crt"}},
			"serverName": "toolgate-controller-manager-metrics-service." + release + ".svc",
		}), "verified against the CA of the certificate the endpoint serves, never skipped by default")
		token := as[corev1.Secret](g, r, "Secret "+release+"/toolgate-metrics-scraper-token")
		g.Expect(token.Type).To(Equal(corev1.SecretTypeServiceAccountToken))
		g.Expect(token.Annotations).To(HaveKeyWithValue(corev1.ServiceAccountNameKey, "toolgate-metrics-scraper"))
		g.Expect(r).To(HaveKey("ServiceAccount " + release + "/toolgate-metrics-scraper"))
		crb := as[rbacv1.ClusterRoleBinding](g, r, "ClusterRoleBinding /toolgate-metrics-scraper-"+release)
		g.Expect(crb.RoleRef.Name).To(Equal("toolgate-metrics-reader"), "the token may read the metrics, nothing more")
		g.Expect(crb.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "toolgate-metrics-scraper", Namespace: release}))

		own := render(t, `metrics: {serviceMonitor: {enabled: true, authorization: {credentials: {name: prom-token, key: t}},
  tlsConfig: {ca: {configMap: {name: corp-ca, key: ca.pem}}, serverName: metrics.example}}}`)
		ep = serviceMonitorEndpoint(g, own)
		g.Expect(ep["authorization"]).To(HaveKeyWithValue("credentials", map[string]any{"name": "prom-token", "key": "t"}))
		g.Expect(ep["tlsConfig"]).To(Equal(map[string]any{"ca": map[string]any{"configMap": map[string]any{"name": "corp-ca", "key": "ca.pem"}}, "serverName": "metrics.example"}))
		g.Expect(own).NotTo(HaveKey("Secret " + release + "/toolgate-metrics-scraper-token"))
		g.Expect(own).NotTo(HaveKey("ServiceAccount " + release + "/toolgate-metrics-scraper"))

		skip := serviceMonitorEndpoint(g, render(t, `metrics: {serviceMonitor: {enabled: true, tlsConfig: {insecureSkipVerify: true}}}`))
		g.Expect(skip["tlsConfig"]).To(HaveKeyWithValue("insecureSkipVerify", true), "only when asked for")

		_, err := renderWith(t, `metrics: {serviceMonitor: {enabled: true}}`)
		g.Expect(err).To(MatchError(ContainSubstring("metrics.serviceMonitor.tlsConfig: the scraper cannot verify the metrics endpoint's certificate")))
		g.Expect(err).To(MatchError(ContainSubstring("metrics.serviceMonitor.tlsConfig.insecureSkipVerify: true")))
	})

	t.Run("the schema refuses bad values with their path", func(t *testing.T) {
		for values, want := range map[string]string{
			`podDisruptionBudget: {minAvailable: abc}`:                                      "/podDisruptionBudget/minAvailable",
			`podDisruptionBudget: {maxUnavailable: "150%"}`:                                 "/podDisruptionBudget/maxUnavailable",
			`podDisruptionBudget: {minAvailable: -1}`:                                       "/podDisruptionBudget/minAvailable",
			`podDisruptionBudget: {minAvailable: 1, maxUnavailable: 1}`:                     "at '/podDisruptionBudget/maxUnavailable': value must be '(unset: minAvailable is set",
			`mcpGateway: {podDisruptionBudget: {minAvailable: abc}}`:                        "/mcpGateway/podDisruptionBudget/minAvailable",
			`mcpGateway: {podDisruptionBudget: {minAvailable: "50%", maxUnavailable: 1}}`:   "/mcpGateway/podDisruptionBudget/maxUnavailable",
			`global: {imagePullSecret: [{name: x}]}`:                                        "at '/global': additional properties 'imagePullSecret' not allowed",
			`global: {commonLabels: {team: 1}}`:                                             "/global/commonLabels/team",
			`commonLabels: {app.kubernetes.io/name: other}`:                                 "/commonLabels/app.kubernetes.io~1name",
			`commonLabels: {control-plane: x}`:                                              "/commonLabels/control-plane",
			`serviceAccount: {create: false}`:                                               "/serviceAccount/name",
			`serviceAccount: {name: Not_A_Name}`:                                            "/serviceAccount/name",
			`serviceAccount: {automount: false}`:                                            "at '/serviceAccount': additional properties 'automount' not allowed",
			`mcpGateway: {serviceAccount: {create: false}}`:                                 "/mcpGateway/serviceAccount/name",
			`podSecurityContext: {runAsUsr: 1000}`:                                          "at '/podSecurityContext': additional properties 'runAsUsr' not allowed",
			`podSecurityContext: {runAsUser: -1}`:                                           "/podSecurityContext/runAsUser",
			`containerSecurityContext: {readOnlyRootFilesystem: "yes"}`:                     "/containerSecurityContext/readOnlyRootFilesystem",
			`mcpGateway: {podSecurityContext: {fsGroup: x}}`:                                "/mcpGateway/podSecurityContext/fsGroup",
			`volumes: [{emptyDir: {}}]`:                                                     "/volumes/0",
			`mcpGateway: {volumeMounts: [{name: x}]}`:                                       "/mcpGateway/volumeMounts/0",
			`extraObjects: [1]`:                                                             "/extraObjects/0",
			`mcpGateway: {image: {pullPolicy: Sometimes}}`:                                  "/mcpGateway/image/pullPolicy",
			`mcpGateway: {nodeSelector: {pool: 1}}`:                                         "/mcpGateway/nodeSelector/pool",
			`mcpGateway: {tls: {certManager: {issuerRef: {kind: Cluster}}}}`:                "/mcpGateway/tls/certManager/issuerRef/kind",
			`mcpGateway: {tls: {certManager: {duration: 90d}}}`:                             "/mcpGateway/tls/certManager/duration",
			`metrics: {serviceMonitor: {tlsConfig: {insecureSkipVerify: "true"}}}`:          "/metrics/serviceMonitor/tlsConfig/insecureSkipVerify",
			`metrics: {serviceMonitor: {tlsConfig: {ca: {secret: {name: x}}}}}`:             "/metrics/serviceMonitor/tlsConfig/ca/secret",
			`metrics: {serviceMonitor: {tlsConfig: {caFile: /etc/ca.crt}}}`:                 "at '/metrics/serviceMonitor/tlsConfig': additional properties 'caFile' not allowed",
			`metrics: {serviceMonitor: {authorization: {credentials: {name: x, key: ""}}}}`: "/metrics/serviceMonitor/authorization/credentials/key",
			`metrics: {serviceMonitor: {bearerTokenFile: /var/run/secrets/token}}`:          "additional properties 'bearerTokenFile' not allowed",
		} {
			_, err := renderWith(t, values)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(want)), values)
		}
	})
}

func serviceMonitorEndpoint(g Gomega, r rendered) map[string]any {
	sm, ok := r["ServiceMonitor "+release+"/toolgate-controller-manager"]
	g.Expect(ok).To(BeTrue(), "the chart renders the manager's ServiceMonitor")
	endpoints := sm["spec"].(map[string]any)["endpoints"].([]any)
	g.Expect(endpoints).To(HaveLen(1))
	return endpoints[0].(map[string]any)
}

// notes is the chart's NOTES.txt for an install with values.
func notes(t *testing.T, values string) string {
	t.Helper()
	g := NewWithT(t)
	v := map[string]any{}
	g.Expect(yaml.Unmarshal([]byte(values), &v)).To(Succeed())
	chrt, err := loader.Load(filepath.Join(repoRoot(t), "dist", "chart"))
	g.Expect(err).NotTo(HaveOccurred())
	renderValues, err := chartutil.ToRenderValues(chrt, v,
		common.ReleaseOptions{Name: "toolgate", Namespace: release, IsInstall: true}, newestKubernetes())
	g.Expect(err).NotTo(HaveOccurred())
	out, err := engine.Render(chrt, renderValues)
	g.Expect(err).NotTo(HaveOccurred())
	for name, text := range out {
		if strings.HasSuffix(name, "NOTES.txt") {
			return text
		}
	}
	t.Fatal("the chart has no NOTES.txt")
	return ""
}
