package installer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// rendered is what the chart renders for one release, by "Kind namespace/name".
type rendered map[string]map[string]any

const release = "agents-gate" // a release namespace that is not the manifest's

func render(t *testing.T, values string) rendered {
	t.Helper()
	g := NewWithT(t)
	stream, err := renderWith(t, values)
	g.Expect(err).NotTo(HaveOccurred())
	out := rendered{}
	for _, obj := range objectsByKey(t, stream) {
		meta := obj["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		out[obj["kind"].(string)+" "+ns+"/"+meta["name"].(string)] = obj
	}
	return out
}

func renderWith(t *testing.T, values string) ([]byte, error) {
	t.Helper()
	v := map[string]any{}
	NewWithT(t).Expect(yaml.Unmarshal([]byte(values), &v)).To(Succeed())
	return renderChart(t, repoRoot(t), release, v)
}

// as decodes the object key into a typed object; it fails the test when the chart did not render it.
func as[T any](g Gomega, r rendered, key string) *T {
	obj, ok := r[key]
	g.Expect(ok).To(BeTrue(), "the chart renders %s (it renders %v)", key, sortedKindNames(r))
	b, err := json.Marshal(obj)
	g.Expect(err).NotTo(HaveOccurred())
	out := new(T)
	g.Expect(json.Unmarshal(b, out)).To(Succeed())
	return out
}

func sortedKindNames(r rendered) []string {
	keys := make([]string, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (r rendered) kinds() map[string]int {
	n := map[string]int{}
	for k := range r {
		n[strings.Fields(k)[0]]++
	}
	return n
}

const manager = "Deployment " + release + "/toolgate-controller-manager"

func managerContainer(g Gomega, r rendered) (*appsv1.Deployment, corev1.Container) {
	d := as[appsv1.Deployment](g, r, manager)
	g.Expect(d.Spec.Template.Spec.Containers).To(HaveLen(1))
	return d, d.Spec.Template.Spec.Containers[0]
}

// With its defaults the chart installs what dist/install.yaml does, into the release namespace: the
// same CRDs, RBAC and admission policies field for field (but for the chart's labels), and a manager
// that runs as the manifest's does. It creates no Namespace (helm install --create-namespace does)
// and no ConfigMap (the provider URL is a value).
func TestChartInstallsWhatTheManifestDoes(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	committed, err := os.ReadFile(filepath.Join(root, "dist", "install.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	manifest := objectsByKey(t, committed)
	g.Expect(manifest).To(HaveLen(countDocuments(committed)), "dist/install.yaml holds duplicate objects")

	stream, err := renderChart(t, root, defaultNamespace, nil)
	g.Expect(err).NotTo(HaveOccurred())
	chart := objectsByKey(t, stream)
	clusterScoped := map[string]bool{}
	for key, want := range manifest {
		kind := want["kind"].(string)
		switch kind {
		case "Namespace", "ConfigMap":
			g.Expect(chart).NotTo(HaveKey(key))
			continue
		case "Deployment", "Service":
			g.Expect(chart).To(HaveKey(key), "the chart renders %s", key)
			continue
		}
		got, ok := chart[key]
		if !ok && want["metadata"].(map[string]any)["namespace"] != nil {
			// kustomize gives cluster-scoped kinds it does not know (admission policies) a namespace.
			meta := want["metadata"].(map[string]any)
			got, ok = chart[strings.Replace(key, " "+defaultNamespace+"/", " <nil>/", 1)]
			delete(meta, "namespace")
			clusterScoped[kind] = true
		}
		g.Expect(ok).To(BeTrue(), "the chart renders %s", key)
		g.Expect(normalized(got)).To(Equal(normalized(want)), "%s differs between the chart and dist/install.yaml", key)
		g.Expect(got["metadata"].(map[string]any)["labels"]).To(HaveKeyWithValue("app.kubernetes.io/instance", "toolgate"), key)
	}
	g.Expect(clusterScoped).To(HaveKey("ValidatingAdmissionPolicy"))

	// The manager: as the manifest's, but for the provider URL (a value here, "" by default) and the
	// tag of the default mcp-call image (the chart's appVersion).
	r := render(t, `provider: {url: "https://approvals.example.com"}`)
	var want appsv1.Deployment
	for _, obj := range manifest {
		if obj["kind"] == "Deployment" {
			b, err := json.Marshal(obj)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(json.Unmarshal(b, &want)).To(Succeed())
		}
	}
	d, c := managerContainer(g, r)
	w := want.Spec.Template.Spec
	wc := w.Containers[0]
	g.Expect(d.Spec.Template.Spec.SecurityContext).To(Equal(w.SecurityContext))
	g.Expect(d.Spec.Template.Spec.ServiceAccountName).To(Equal(w.ServiceAccountName))
	g.Expect(c.SecurityContext).To(Equal(wc.SecurityContext))
	g.Expect(c.LivenessProbe).To(Equal(wc.LivenessProbe))
	g.Expect(c.ReadinessProbe).To(Equal(wc.ReadinessProbe))
	g.Expect(c.Ports).To(Equal(wc.Ports))
	g.Expect(c.Resources).To(Equal(wc.Resources))
	g.Expect(c.Command).To(Equal(wc.Command))
	g.Expect(c.Args).To(ContainElements(slices.DeleteFunc(slices.Clone(wc.Args), func(a string) bool {
		return strings.HasPrefix(a, "--provider-url=") || strings.HasPrefix(a, "--mcp-executor-image=")
	})))
	g.Expect(c.Args).To(ContainElement("--provider-url=https://approvals.example.com"))
	g.Expect(wc.Args).To(ContainElement("--mcp-executor-image=" + defaultExecutorImage(t)))
	g.Expect(c.Args).To(ContainElement("--mcp-executor-image=mcp-call:0.1.0"), "the mcp-call image of the chart's appVersion")
	g.Expect(c.Image).To(Equal("toolgate:0.1.0"), "the tag defaults to the chart's appVersion")
}

// normalized is obj without what only the chart adds: its labels, and the keep annotation of CRDs
// (checked by TestChartValues).
func normalized(obj map[string]any) map[string]any {
	b, _ := json.Marshal(obj)
	out := map[string]any{}
	_ = json.Unmarshal(b, &out)
	meta := out["metadata"].(map[string]any)
	delete(meta, "labels")
	if a, ok := meta["annotations"].(map[string]any); ok {
		delete(a, "helm.sh/resource-policy")
	}
	return out
}

// The files the chart ships as they are (files/) are the ones in config/: make build-installer copies
// them.
func TestChartFilesAreUpToDate(t *testing.T) {
	g := NewWithT(t)
	root := repoRoot(t)
	for chart, source := range map[string]string{
		"prometheus-rules.yaml":  "config/prometheus/rules.yaml",
		"grafana-dashboard.json": "config/grafana/toolgate-dashboard.json",
	} {
		want, err := os.ReadFile(filepath.Join(root, source))
		g.Expect(err).NotTo(HaveOccurred())
		got, err := os.ReadFile(filepath.Join(root, "dist", "chart", "files", chart))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(got)).To(Equal(string(want)), "dist/chart/files/%s differs from %s: run make build-installer", chart, source)
	}
}

// The chart's version and appVersion are semantic versions, the image tag defaults to appVersion.
func TestChartVersions(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "dist", "chart", "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	var chart struct{ Version, AppVersion string }
	g.Expect(yaml.Unmarshal(data, &chart)).To(Succeed())
	semver := `^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`
	g.Expect(chart.Version).To(MatchRegexp(semver))
	g.Expect(chart.AppVersion).To(MatchRegexp(semver))
}

// Each value of values.yaml does what it says, and only that.
func TestChartValues(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, ``)
		kinds := r.kinds()
		for _, absent := range []string{"Namespace", "ConfigMap", "PodDisruptionBudget", "NetworkPolicy", "ServiceMonitor", "Certificate", "PrometheusRule"} {
			g.Expect(kinds).NotTo(HaveKey(absent))
		}
		g.Expect(kinds).To(HaveKeyWithValue("CustomResourceDefinition", 5))
		g.Expect(kinds).To(HaveKeyWithValue("ValidatingAdmissionPolicy", 5))
		g.Expect(r).NotTo(HaveKey("Service " + release + "/toolgate-aap-receiver"))
		g.Expect(r).NotTo(HaveKey("Deployment " + release + "/toolgate-mcp"))
		d, c := managerContainer(g, r)
		g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(1))
		g.Expect(c.Args).NotTo(ContainElement(HavePrefix("--provider-url")), "no provider of its own by default")
		g.Expect(c.Args).To(ContainElement("--cluster-resource-namespace=" + release))
		g.Expect(c.Args).NotTo(ContainElement(HavePrefix("--finished-toolcall-ttl")), "finished calls are kept by default")
		for key, obj := range r {
			ns := obj["metadata"].(map[string]any)["namespace"]
			g.Expect(ns == nil || ns == release).To(BeTrue(), "%s is in the release namespace", key)
		}
		for _, name := range []string{"toolgate-toolcall-writers", "toolgate-execution-records"} {
			writers, ok := r["ValidatingAdmissionPolicy /"+name]
			g.Expect(ok).To(BeTrue(), name)
			b, _ := json.Marshal(writers)
			g.Expect(string(b)).To(ContainSubstring(`'`+release+`'`), "%s names the manager's ServiceAccount in the release namespace", name)
			g.Expect(string(b)).NotTo(ContainSubstring(defaultNamespace), name)
		}
		for key, obj := range r {
			if obj["kind"] == "CustomResourceDefinition" {
				g.Expect(obj["metadata"].(map[string]any)["annotations"]).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"), key)
			}
		}
	})

	t.Run("crds", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(render(t, `crds: {enabled: false}`).kinds()).NotTo(HaveKey("CustomResourceDefinition"))
		for key, obj := range render(t, `crds: {keep: false}`) {
			if obj["kind"] == "CustomResourceDefinition" {
				g.Expect(obj["metadata"].(map[string]any)["annotations"]).NotTo(HaveKey("helm.sh/resource-policy"), key)
			}
		}
	})

	t.Run("admission policies", func(t *testing.T) {
		g := NewWithT(t)
		kinds := render(t, `admissionPolicies: {enabled: false}`).kinds()
		for _, k := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
			g.Expect(kinds).NotTo(HaveKey(k))
		}
		g.Expect(kinds).To(HaveKey("CustomResourceDefinition"))
	})

	t.Run("replicas and disruption budget", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `replicaCount: 3`)
		d, _ := managerContainer(g, r)
		g.Expect(*d.Spec.Replicas).To(BeEquivalentTo(3))
		pdb := as[policyv1.PodDisruptionBudget](g, r, "PodDisruptionBudget "+release+"/toolgate-controller-manager")
		g.Expect(pdb.Spec.MinAvailable.IntValue()).To(Equal(1))
		g.Expect(selects(g, pdb.Spec.Selector, d.Spec.Template.Labels)).To(BeTrue())
		g.Expect(render(t, `{replicaCount: 3, podDisruptionBudget: {enabled: false}}`).kinds()).NotTo(HaveKey("PodDisruptionBudget"))
	})

	t.Run("scheduling, pull secrets, extra args and env", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `
image: {repository: registry.example.com/toolgate, tag: v1.2.3, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
resources: {requests: {cpu: 100m, memory: 128Mi}}
nodeSelector: {pool: system}
tolerations: [{key: dedicated, operator: Equal, value: system, effect: NoSchedule}]
affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]}}}
priorityClassName: system-cluster-critical
podAnnotations: {example.com/a: b}
podLabels: {team: platform}
extraArgs: [--max-concurrent-reconciles=8]
extraEnv: [{name: GOMEMLIMIT, value: 200MiB}]
`)
		d, c := managerContainer(g, r)
		s := d.Spec.Template.Spec
		g.Expect(c.Image).To(Equal("registry.example.com/toolgate:v1.2.3"))
		g.Expect(c.ImagePullPolicy).To(Equal(corev1.PullAlways))
		g.Expect(s.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "regcred"}}))
		g.Expect(c.Resources.Requests.Cpu().String()).To(Equal("100m"))
		g.Expect(c.Resources.Limits.Cpu().String()).To(Equal("500m"), "Helm merges maps: the default limits stay unless set to null")
		g.Expect(s.NodeSelector).To(Equal(map[string]string{"pool": "system"}))
		g.Expect(s.Tolerations).To(HaveLen(1))
		g.Expect(s.Affinity.NodeAffinity).NotTo(BeNil())
		g.Expect(s.PriorityClassName).To(Equal("system-cluster-critical"))
		g.Expect(d.Spec.Template.Annotations).To(HaveKeyWithValue("example.com/a", "b"))
		g.Expect(d.Spec.Template.Labels).To(HaveKeyWithValue("team", "platform"))
		g.Expect(selects(g, d.Spec.Selector, d.Spec.Template.Labels)).To(BeTrue())
		g.Expect(c.Args).To(ContainElement("--max-concurrent-reconciles=8"))
		g.Expect(c.Env).To(ContainElement(corev1.EnvVar{Name: "GOMEMLIMIT", Value: "200MiB"}))
	})

	t.Run("provider", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `provider: {url: "https://approvals.internal.example:8443/base", credentialSecret: aap-cred, caConfigMap: aap-ca}
clusterResourceNamespace: shared-secrets
finishedToolCallTTL: 720h`)
		d, c := managerContainer(g, r)
		g.Expect(c.Args).To(ContainElements("--provider-url=https://approvals.internal.example:8443/base",
			"--provider-credential-file=/var/run/toolgate/provider/credential", "--provider-ca-file=/var/run/toolgate/provider-ca/ca.crt",
			"--cluster-resource-namespace=shared-secrets", "--finished-toolcall-ttl=720h"))
		g.Expect(volume(g, d, "provider-credential").Secret.SecretName).To(Equal("aap-cred"))
		g.Expect(volume(g, d, "provider-credential").Secret.Optional).To(BeNil(), "the Pod waits for the credential rather than crash")
		g.Expect(volume(g, d, "provider-ca").ConfigMap.Name).To(Equal("aap-ca"))
	})

	t.Run("metrics", func(t *testing.T) {
		g := NewWithT(t)
		off := render(t, `metrics: {enabled: false}`)
		_, c := managerContainer(g, off)
		g.Expect(c.Args).To(ContainElement("--metrics-bind-address=0"))
		g.Expect(off).NotTo(HaveKey("Service " + release + "/toolgate-controller-manager-metrics-service"))

		r := render(t, `metrics: {certificate: {secretName: metrics-tls}, serviceMonitor: {enabled: true, labels: {release: prom}}}`)
		d, c := managerContainer(g, r)
		g.Expect(c.Args).To(ContainElements("--metrics-bind-address=:8443", "--metrics-cert-dir=/var/run/toolgate/metrics"))
		g.Expect(volume(g, d, "metrics-tls").Secret.SecretName).To(Equal("metrics-tls"))
		svc := as[corev1.Service](g, r, "Service "+release+"/toolgate-controller-manager-metrics-service")
		g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
		sm := r["ServiceMonitor "+release+"/toolgate-controller-manager"]
		g.Expect(sm).NotTo(BeNil())
		g.Expect(sm["metadata"].(map[string]any)["labels"]).To(HaveKeyWithValue("release", "prom"))
		var smSelector metav1.LabelSelector
		b, _ := json.Marshal(sm["spec"].(map[string]any)["selector"])
		g.Expect(json.Unmarshal(b, &smSelector)).To(Succeed())
		g.Expect(selects(g, &smSelector, svc.Labels)).To(BeTrue(), "the ServiceMonitor selects the metrics Service")
	})

	t.Run("alerts and dashboard", func(t *testing.T) {
		g := NewWithT(t)
		root := repoRoot(t)
		r := render(t, `metrics: {prometheusRule: {enabled: true, labels: {release: prom}}, dashboard: {enabled: true}}`)
		rule := r["PrometheusRule "+release+"/toolgate"]
		g.Expect(rule).NotTo(BeNil())
		g.Expect(rule["metadata"].(map[string]any)["labels"]).To(HaveKeyWithValue("release", "prom"))
		source, err := os.ReadFile(filepath.Join(root, "config", "prometheus", "rules.yaml"))
		g.Expect(err).NotTo(HaveOccurred())
		want := map[string]any{}
		g.Expect(yaml.Unmarshal(source, &want)).To(Succeed())
		g.Expect(rule["spec"]).To(Equal(want), "the PrometheusRule holds config/prometheus/rules.yaml")
		cm := as[corev1.ConfigMap](g, r, "ConfigMap "+release+"/toolgate-dashboard")
		g.Expect(cm.Labels).To(HaveKeyWithValue("grafana_dashboard", "1"))
		dashboard, err := os.ReadFile(filepath.Join(root, "config", "grafana", "toolgate-dashboard.json"))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cm.Data["toolgate.json"]).To(MatchJSON(dashboard))

		sm := render(t, `metrics: {serviceMonitor: {enabled: true, tlsConfig: {insecureSkipVerify: true}}}`)["ServiceMonitor "+release+"/toolgate-controller-manager"]
		endpoints := sm["spec"].(map[string]any)["endpoints"].([]any)
		g.Expect(endpoints[0]).To(HaveKeyWithValue("honorLabels", true), "the series' namespace label is the ToolCall's")
	})

	t.Run("receiver", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `receiver: {enabled: true, tls: {secretName: rx-tls, certManager: {enabled: true, issuerRef: {name: internal-ca, kind: ClusterIssuer}}}}`)
		d, c := managerContainer(g, r)
		g.Expect(c.Args).To(ContainElements("--receiver-bind-address=:9443", "--receiver-cert-dir=/var/run/toolgate/receiver"))
		g.Expect(c.Ports).To(ContainElement(HaveField("Name", "receiver")))
		g.Expect(volume(g, d, "receiver-tls").Secret.SecretName).To(Equal("rx-tls"))
		svc := as[corev1.Service](g, r, "Service "+release+"/toolgate-aap-receiver")
		g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
		cert := r["Certificate "+release+"/toolgate-aap-receiver"]
		g.Expect(cert).NotTo(BeNil())
		spec := cert["spec"].(map[string]any)
		g.Expect(spec["secretName"]).To(Equal("rx-tls"))
		g.Expect(spec["dnsNames"]).To(ContainElement("toolgate-aap-receiver." + release + ".svc"))
		g.Expect(spec["issuerRef"]).To(HaveKeyWithValue("kind", "ClusterIssuer"))

		_, err := renderWith(t, `receiver: {enabled: true, tls: {certManager: {enabled: true}}}`)
		g.Expect(err).To(MatchError(ContainSubstring("receiver.tls.certManager.issuerRef: name the cert-manager Issuer")))
	})

	t.Run("network policy", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `{networkPolicy: {enabled: true, metricsFrom: [{namespaceSelector: {matchLabels: {name: monitoring}}}]}, receiver: {enabled: true}}`)
		np := as[networkingv1.NetworkPolicy](g, r, "NetworkPolicy "+release+"/toolgate-controller-manager")
		d, _ := managerContainer(g, r)
		g.Expect(selects(g, &np.Spec.PodSelector, d.Spec.Template.Labels)).To(BeTrue())
		g.Expect(np.Spec.Ingress).To(HaveLen(2))
		g.Expect(np.Spec.Ingress[0].Ports[0].Port.IntValue()).To(Equal(8443))
		g.Expect(np.Spec.Ingress[0].From).To(HaveLen(1))
		g.Expect(np.Spec.Ingress[1].Ports[0].Port.IntValue()).To(Equal(9443))
		g.Expect(np.Spec.Ingress[1].From).To(BeEmpty(), "providers anywhere deliver notifications")
	})

	t.Run("MCP gateway", func(t *testing.T) {
		g := NewWithT(t)
		r := render(t, `mcpGateway: {enabled: true, namespace: payments, tls: {secretName: mcp-tls}, image: {repository: registry.example.com/toolgate-mcp, tag: v1.2.3}}`)
		gw := as[appsv1.Deployment](g, r, "Deployment "+release+"/toolgate-mcp")
		c := gw.Spec.Template.Spec.Containers[0]
		g.Expect(c.Image).To(Equal("registry.example.com/toolgate-mcp:v1.2.3"))
		g.Expect(c.Args).To(ContainElements("--namespace=payments", "--url=https://toolgate-mcp."+release+".svc:8090/mcp",
			"--tls-cert-file=/var/run/toolgate/mcp-tls/tls.crt", "--metrics-bind-address=:8080", "--health-probe-bind-address=:8081"))
		g.Expect(c.Args).NotTo(ContainElement("--unauthenticated"))
		g.Expect(gw.Spec.Template.Spec.ServiceAccountName).To(Equal("toolgate-mcp"))
		g.Expect(selects(g, gw.Spec.Selector, gw.Spec.Template.Labels)).To(BeTrue())
		mgr, _ := managerContainer(g, r)
		g.Expect(selects(g, mgr.Spec.Selector, gw.Spec.Template.Labels)).To(BeFalse(), "the manager's selector leaves the gateway's Pods out")
		g.Expect(selects(g, gw.Spec.Selector, mgr.Spec.Template.Labels)).To(BeFalse())
		svc := as[corev1.Service](g, r, "Service "+release+"/toolgate-mcp")
		g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(gw.Spec.Template.Labels))).To(BeTrue())
		g.Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(mgr.Spec.Template.Labels))).To(BeFalse())
		gatewaySA := rbacv1.Subject{Kind: "ServiceAccount", Name: "toolgate-mcp", Namespace: release}
		rb := as[rbacv1.RoleBinding](g, r, "RoleBinding payments/toolgate-mcp-"+release)
		g.Expect(rb.RoleRef.Name).To(Equal("toolgate-mcp-gateway"))
		g.Expect(rb.Subjects).To(ConsistOf(gatewaySA))
		crb := as[rbacv1.ClusterRoleBinding](g, r, "ClusterRoleBinding /toolgate-mcp-"+release+"-authenticator")
		g.Expect(crb.RoleRef.Name).To(Equal("toolgate-mcp-gateway-authenticator"))
		for _, role := range []string{"toolgate-mcp-gateway", "toolgate-mcp-gateway-impersonator", "toolgate-mcp-gateway-authenticator"} {
			g.Expect(r).To(HaveKey("ClusterRole /"+role), "the roles it binds ship with the chart")
		}
		// No callers listed, in another namespace than the release's: it acts as that namespace's
		// ServiceAccounts, and only there.
		imp := as[rbacv1.RoleBinding](g, r, "RoleBinding payments/toolgate-mcp-"+release+"-impersonator")
		g.Expect(imp.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "toolgate-mcp-gateway-impersonator"}))
		g.Expect(imp.Subjects).To(ConsistOf(gatewaySA))
		g.Expect(r).NotTo(HaveKey("Role payments/toolgate-mcp-" + release + "-callers"))
		for _, rule := range as[rbacv1.ClusterRole](g, r, "ClusterRole /toolgate-mcp-gateway").Rules {
			g.Expect(rule.Verbs).NotTo(ContainElement("impersonate"), "the role bound for its work in the served namespace impersonates nobody")
		}

		// Its callers listed, in the release namespace: a Role that may impersonate them by name.
		listed := render(t, `mcpGateway: {enabled: true, callers: [refund-agent, billing-agent]}`)
		gw = as[appsv1.Deployment](g, listed, "Deployment "+release+"/toolgate-mcp")
		g.Expect(gw.Spec.Template.Spec.Containers[0].Args).To(ContainElements("--namespace="+release, "--url=http://toolgate-mcp."+release+".svc:8090/mcp"))
		g.Expect(gw.Spec.Template.Spec.Containers[0].Image).To(Equal("toolgate-mcp:0.1.0"))
		callers := as[rbacv1.Role](g, listed, "Role "+release+"/toolgate-mcp-"+release+"-callers")
		g.Expect(callers.Rules).To(ConsistOf(rbacv1.PolicyRule{
			APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"impersonate"},
			ResourceNames: []string{"refund-agent", "billing-agent"},
		}))
		crb2 := as[rbacv1.RoleBinding](g, listed, "RoleBinding "+release+"/toolgate-mcp-"+release+"-callers")
		g.Expect(crb2.RoleRef).To(Equal(rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "toolgate-mcp-" + release + "-callers"}))
		g.Expect(crb2.Subjects).To(ConsistOf(gatewaySA))
		g.Expect(listed).NotTo(HaveKey("RoleBinding "+release+"/toolgate-mcp-"+release+"-impersonator"), "nothing lets it act as the release namespace's other ServiceAccounts")
		// In another namespace, a ServiceAccount named like the manager's is someone else's.
		elsewhere := render(t, `mcpGateway: {enabled: true, namespace: payments, callers: [toolgate-controller-manager]}`)
		g.Expect(as[rbacv1.Role](g, elsewhere, "Role payments/toolgate-mcp-"+release+"-callers").Rules[0].ResourceNames).To(Equal([]string{"toolgate-controller-manager"}))
	})

	t.Run("the MCP gateway never acts as the manager", func(t *testing.T) {
		for values, want := range map[string][]string{
			`mcpGateway: {enabled: true}`: {
				"mcpGateway.callers is empty and the gateway serves the release namespace " + release,
				"where the manager's ServiceAccount lives", "List the ServiceAccounts of " + release + " that call the gateway in mcpGateway.callers", "mcpGateway.namespace",
			},
			`mcpGateway: {enabled: true, namespace: ` + release + `}`: {"mcpGateway.callers is empty and the gateway serves the release namespace " + release},
			`mcpGateway: {enabled: true, callers: [refund-agent, toolgate-controller-manager]}`: {
				"mcpGateway.callers names toolgate-controller-manager, a ServiceAccount of this release in its namespace " + release + " (the manager's)",
				"Remove it from mcpGateway.callers",
			},
			`mcpGateway: {enabled: true, callers: [toolgate-mcp]}`: {"mcpGateway.callers names toolgate-mcp, a ServiceAccount of this release in its namespace " + release + " (the gateway's own)"},
		} {
			_, err := renderWith(t, values)
			g := NewWithT(t)
			g.Expect(err).To(HaveOccurred(), values)
			for _, w := range want {
				g.Expect(err.Error()).To(ContainSubstring(w), values)
			}
		}
		// Off, the gateway asks for nothing.
		NewWithT(t).Expect(render(t, `mcpGateway: {enabled: false}`)).NotTo(HaveKey(HaveSuffix("-callers")))
	})

	t.Run("the schema refuses bad values with their path", func(t *testing.T) {
		for values, want := range map[string]string{
			`replicaCount: 0`:                                                        "/replicaCount",
			`mcpGatway: {enabled: true}`:                                             "mcpGatway",
			`provider: {url: "ftp://example.com"}`:                                   "/provider/url",
			`extraArgs: [max-concurrent-reconciles]`:                                 "/extraArgs/0",
			`mcpGateway: {waitingLimit: ten}`:                                        "/mcpGateway/waitingLimit",
			`mcpGateway: {callers: ["system:serviceaccount:payments:refund-agent"]}`: "/mcpGateway/callers/0",
			`mcpGateway: {callers: [refund-agent, refund-agent]}`:                    "/mcpGateway/callers",
			`mcpGateway: {callers: refund-agent}`:                                    "/mcpGateway/callers",
			`image: {pullPolicy: Sometimes}`:                                         "/image/pullPolicy",
		} {
			_, err := renderWith(t, values)
			NewWithT(t).Expect(err).To(MatchError(ContainSubstring(want)), values)
		}
	})
}

func selects(g Gomega, s *metav1.LabelSelector, set map[string]string) bool {
	sel, err := metav1.LabelSelectorAsSelector(s)
	g.Expect(err).NotTo(HaveOccurred())
	return !sel.Empty() && sel.Matches(labels.Set(set))
}

func volume(g Gomega, d *appsv1.Deployment, name string) corev1.Volume {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	g.Expect(name).To(BeEmpty(), "the Pod has no volume %s", name)
	return corev1.Volume{}
}
