//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/kube"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/test/testenv"
)

// The chart, as a platform team runs it: hack/cluster.sh installed the release toolgate with the
// Helm command line; here Helm's SDK upgrades it to two manager replicas with the MCP gateway on
// (the receiver is on already), an agent outside the cluster calls a Tool through the in-cluster
// gateway with the official TypeScript MCP SDK client and gets the tool's own result once a human
// approved, and `helm uninstall` leaves the CRDs and the ToolCall, the record of what ran. The
// release is installed again at the end, as hack/cluster.sh left it.
func TestChartUpgradeCallThroughTheGatewayAndUninstall(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	helm := newHelm(t, g)
	t.Cleanup(func() { helm.restore(t) })

	// The gateway acts only as its caller, the agent below (mcpGateway.callers).
	helm.upgrade(g, map[string]any{"replicaCount": 2, "mcpGateway": map[string]any{"enabled": true, "namespace": ns, "callers": []any{"agent"}}})
	waitManagerReady(g)
	g.Expect(managerPods(g)).To(HaveLen(2))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-controller-manager"}, &policyv1.PodDisruptionBudget{})).To(Succeed())
	gateway := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-mcp"}, gateway)).To(Succeed())
	g.Expect(gateway.Status.ReadyReplicas).To(BeEquivalentTo(1), "the upgrade waited for the gateway")

	// The agent: a ServiceAccount of ns that may call issue_refund there, with a token for the
	// gateway's own URL as audience.
	createTool(t, g, sampleTool(t, ns))
	g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}})).To(Succeed())
	for _, role := range []string{"toolgate-toolcall-agent", "toolgate-call-issue-refund"} {
		g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "agent"}},
		})).To(Succeed())
	}
	cs, err := kubernetes.NewForConfig(restConfig)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{"http://toolgate-mcp." + systemNamespace + ".svc:8090/mcp"}, ExpirationSeconds: ptr.To[int64](900),
	}}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	svc := &corev1.Service{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-mcp"}, svc)).To(Succeed())

	args := `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`
	agent := startTSAgent(t, g, "http://"+svc.Spec.ClusterIP+":8090/mcp", "issue_refund", args, tr.Status.Token)
	g.Eventually(agent.lines).WithTimeout(stepTimeout).Should(ContainElement("calling"))
	g.Expect(agent.lines()).To(ContainElement(HavePrefix("listed issue_refund")))
	var tc *tg.ToolCall
	g.Eventually(func(g Gomega) {
		list := &tg.ToolCallList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		tc = &list.Items[0]
		g.Expect(tc.Status.Phase).To(Equal(tg.PhaseAwaitingApproval))
	}).WithTimeout(stepTimeout).Should(Succeed())
	g.Expect(tc.Spec.Requester.Username).To(Equal("system:serviceaccount:"+ns+":agent"), "created as the agent")
	decide(g, tc, true, "5m")

	var result string
	g.Eventually(func() string {
		for _, l := range agent.lines() {
			if r, ok := strings.CutPrefix(l, "result "); ok {
				result = r
			}
		}
		return result
	}).WithTimeout(stepTimeout).ShouldNot(BeEmpty(), "the agent's output: %v", agent.lines())
	var res struct {
		IsError bool                    `json:"isError"`
		Content []struct{ Text string } `json:"content"`
	}
	g.Expect(json.Unmarshal([]byte(result), &res)).To(Succeed())
	g.Expect(res.IsError).To(BeFalse(), result)
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(res.Content).To(HaveLen(1))
	g.Expect(res.Content[0].Text).To(Equal(tc.Status.Result), "the agent got the tool's own result")
	expectReceipt(g, tc)

	helm.uninstall(g)
	crd := &metav1.PartialObjectMetadata{}
	crd.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	g.Expect(k8s.Get(ctx, client.ObjectKey{Name: "toolcalls.toolgate.dev"}, crd)).To(Succeed(), "the CRDs stay")
	g.Expect(crd.DeletionTimestamp).To(BeNil())
	kept := get(g, tc)
	g.Expect(kept.Status.Phase).To(Equal(tg.PhaseSucceeded), "the ToolCall stays, with its outcome")
	err = k8s.Get(ctx, client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-controller-manager"}, &appsv1.Deployment{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the manager is gone: %v", err)
	err = k8s.Get(ctx, client.ObjectKey{Name: "toolgate-manager-role"}, &rbacv1.ClusterRole{})
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "its RBAC is gone: %v", err)
}

// helmRelease drives the release hack/cluster.sh installed, with Helm's SDK.
type helmRelease struct {
	cfg  *action.Configuration
	dir  string
	base map[string]any // config/dev/values.yaml
	mu   sync.Mutex
	gone bool
}

func newHelm(t *testing.T, g Gomega) *helmRelease {
	t.Helper()
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "config", "dev", "values.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	base := map[string]any{}
	g.Expect(yaml.Unmarshal(data, &base)).To(Succeed())
	// The release's fields are applied server-side under the name the helm command line uses, which
	// installed it.
	kube.ManagedFieldsManager = "helm"
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(slog.DiscardHandler))
	g.Expect(cfg.Init(restGetter{config: restConfig, namespace: systemNamespace}, systemNamespace, "secret")).To(Succeed())
	return &helmRelease{cfg: cfg, dir: filepath.Join(root, "dist", "chart"), base: base}
}

// values is config/dev's values with overlay merged in, key by key at every level, as Helm merges
// a second values file.
func (h *helmRelease) values(overlay map[string]any) map[string]any {
	b, _ := json.Marshal(h.base)
	out := map[string]any{}
	_ = json.Unmarshal(b, &out)
	merge(out, overlay)
	return out
}

func merge(into, from map[string]any) {
	for k, v := range from {
		sub, ok := v.(map[string]any)
		if cur, isMap := into[k].(map[string]any); ok && isMap {
			merge(cur, sub)
			continue
		}
		into[k] = v
	}
}

func (h *helmRelease) upgrade(g Gomega, overlay map[string]any) {
	ch, err := loader.Load(h.dir)
	g.Expect(err).NotTo(HaveOccurred())
	up := action.NewUpgrade(h.cfg)
	up.Namespace = systemNamespace
	up.WaitStrategy = kube.StatusWatcherStrategy
	up.Timeout = 5 * time.Minute
	up.ForceConflicts = true // as --force-conflicts: other tests scale the manager with a client of their own
	_, err = up.RunWithContext(context.Background(), "toolgate", ch, h.values(overlay))
	g.Expect(err).NotTo(HaveOccurred(), "helm upgrade")
}

func (h *helmRelease) uninstall(g Gomega) {
	un := action.NewUninstall(h.cfg)
	un.WaitStrategy = kube.StatusWatcherStrategy
	un.Timeout = 5 * time.Minute
	_, err := un.Run("toolgate")
	g.Expect(err).NotTo(HaveOccurred(), "helm uninstall")
	h.mu.Lock()
	h.gone = true
	h.mu.Unlock()
}

// restore leaves the release as hack/cluster.sh installed it: installed again after an uninstall
// (the CRDs it kept are adopted), or upgraded back to config/dev's values.
func (h *helmRelease) restore(t *testing.T) {
	g := NewWithT(t)
	h.mu.Lock()
	gone := h.gone
	h.mu.Unlock()
	if !gone {
		h.upgrade(g, nil)
		waitManagerReady(g)
		return
	}
	ch, err := loader.Load(h.dir)
	g.Expect(err).NotTo(HaveOccurred())
	in := action.NewInstall(h.cfg)
	in.ReleaseName = "toolgate"
	in.Namespace = systemNamespace
	in.WaitStrategy = kube.StatusWatcherStrategy
	in.Timeout = 5 * time.Minute
	_, err = in.RunWithContext(context.Background(), ch, h.values(nil))
	g.Expect(err).NotTo(HaveOccurred(), "helm install again")
	waitManagerReady(g)
}

// restGetter gives Helm's SDK the suite's rest.Config.
type restGetter struct {
	config    *rest.Config
	namespace string
}

func (r restGetter) ToRESTConfig() (*rest.Config, error) { return rest.CopyConfig(r.config), nil }

func (r restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(rest.CopyConfig(r.config))
	if err != nil {
		return nil, err
	}
	return memory.NewMemCacheClient(dc), nil
}

func (r restGetter) ToRESTMapper() (meta.RESTMapper, error) {
	dc, err := r.ToDiscoveryClient()
	if err != nil {
		return nil, err
	}
	return restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(dc), dc, nil), nil
}

func (r restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(),
		&clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: r.namespace}})
}

// tsAgent is test/mcpagent/ts/agent.cjs running: the official TypeScript MCP SDK client.
type tsAgent struct {
	mu     sync.Mutex
	output []string
}

func (a *tsAgent) lines() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.output...)
}

// startTSAgent connects the TypeScript SDK client to url with token and starts a call of tool.
func startTSAgent(t *testing.T, g Gomega, url, tool, args, token string) *tsAgent {
	t.Helper()
	sdk, err := testenv.NPMPackageDir("mcpagent", filepath.Join("node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	g.Expect(err).NotTo(HaveOccurred(), "the TypeScript MCP SDK")
	cmd := exec.Command("node", filepath.Join("..", "mcpagent", "ts", "agent.cjs"), url, tool, args)
	cmd.Env = append(os.Environ(), "TOOLGATE_MCP_SDK_DIR="+sdk, "TOOLGATE_MCP_TOKEN="+token)
	stdout, err := cmd.StdoutPipe()
	g.Expect(err).NotTo(HaveOccurred())
	stdin, err := cmd.StdinPipe()
	g.Expect(err).NotTo(HaveOccurred())
	var stderr strings.Builder
	cmd.Stderr = &stderr
	g.Expect(cmd.Start()).To(Succeed())
	a := &tsAgent{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			a.mu.Lock()
			a.output = append(a.output, lines.Text())
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("TypeScript agent output %v, stderr:\n%s", a.lines(), stderr.String())
		}
	})
	return a
}
