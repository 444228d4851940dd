//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Installed as users install from a registry: every image of hack/images.txt, built for linux/amd64
// and linux/arm64 as one image index each (hack/image-index.sh), and the chart are pushed to a
// registry on this machine that wants credentials (go-containerregistry's registry behind HTTP basic
// auth, on the loopback address, which containerd reaches over plain HTTP); the chart is installed
// from there with `helm install oci://...` in a namespace of its own, every image by digest and
// pulled with an imagePullSecret. The kubelet pulled each image from that registry (the Pods'
// imageID is the pushed index's digest; the registry served that index and this node's platform's
// manifest to the pull secret's user), and a ToolCall runs to Succeeded in the tool's image, pulled
// the same way.
//
// The chart installs one release per cluster (its cluster-scoped objects have fixed names), so the
// release hack/cluster.sh installed is uninstalled first (its CRDs stay and serve this one, which
// installs none) and installed again at the end, as TestChartUpgradeCallThroughTheGatewayAndUninstall
// does.
func TestInstallFromARegistry(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	g.Expect(err).NotTo(HaveOccurred())
	work := t.TempDir()

	// Every image, both platforms, one index each.
	indexes := buildImageIndexes(t, g, root, filepath.Join(work, "oci"))
	g.Expect(indexes).To(HaveKey("toolgate"))
	g.Expect(indexes).To(HaveKey("toolgate-mcp"))
	g.Expect(indexes).To(HaveKey("issue-refund"))

	reg := startRegistry(t)
	auth := remote.WithAuth(&authn.Basic{Username: reg.user, Password: reg.password})
	digests := map[string]v1.Hash{}
	for image, idx := range indexes {
		ref, err := name.ParseReference(reg.host+"/toolgate/"+image+":"+idx.tag, name.Insecure)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(remote.WriteIndex(ref, idx.index, auth)).To(Succeed(), "push %s", ref)
		pushed, err := remote.Index(ref, auth)
		g.Expect(err).NotTo(HaveOccurred())
		d, err := pushed.Digest()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d).To(Equal(idx.digest), "%s: the registry holds the index that was built", ref)
		m, err := pushed.IndexManifest()
		g.Expect(err).NotTo(HaveOccurred())
		var platforms []string
		for _, desc := range m.Manifests {
			platforms = append(platforms, desc.Platform.String())
		}
		g.Expect(platforms).To(ConsistOf("linux/amd64", "linux/arm64"), "%s lists both platforms", ref)
		digests[image] = d
	}
	_, err = remote.Index(mustRef(g, reg.host+"/toolgate/toolgate:"+indexes["toolgate"].tag))
	g.Expect(err).To(MatchError(ContainSubstring("401")), "the registry wants credentials")

	// The chart, pushed with the Helm command line, as a release pipeline does.
	helm := newHelmCLI(t, g, root, work)
	helm.run(g, reg.password, "registry", "login", reg.host, "--plain-http", "--username", reg.user, "--password-stdin")
	helm.run(g, "", "package", filepath.Join(root, "dist", "chart"), "--destination", work)
	var chart struct{ Version string }
	data, err := os.ReadFile(filepath.Join(root, "dist", "chart", "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(yaml.Unmarshal(data, &chart)).To(Succeed())
	chartVersion := chart.Version
	helm.run(g, "", "push", filepath.Join(work, "toolgate-"+chartVersion+".tgz"), "oci://"+reg.host+"/charts", "--plain-http")

	// One release per cluster: the suite's release makes way, and comes back at the end.
	suite := newHelm(t, g)
	t.Cleanup(func() { suite.restore(t) })
	suite.uninstall(g)

	release := "e2e-registry-" + rand.String(5)
	toolNS := newNamespace(t)
	g.Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}})).To(Succeed())
	t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: release}})
	})
	for _, ns := range []string{release, toolNS} {
		g.Expect(k8s.Create(ctx, reg.pullSecret(g, ns, "regcred"))).To(Succeed())
	}
	repo := func(image string) string { return reg.host + "/toolgate/" + image }
	values := map[string]any{
		"image":            map[string]any{"repository": repo("toolgate"), "digest": digests["toolgate"].String(), "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		// The suite's CRDs, kept by its uninstall, serve this release.
		"crds": map[string]any{"enabled": false},
		// The cluster's ClusterApprovalProvider default keeps its Secret where the suite's release had it.
		"clusterResourceNamespace": systemNamespace,
		"mcpGateway": map[string]any{"enabled": true, "namespace": toolNS, "callers": []any{"agent"},
			"image": map[string]any{"repository": repo("toolgate-mcp"), "digest": digests["toolgate-mcp"].String()}},
	}
	valuesFile := filepath.Join(work, "values.yaml")
	data, err = yaml.Marshal(values)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.WriteFile(valuesFile, data, 0o600)).To(Succeed())
	t.Cleanup(func() {
		helm.run(NewWithT(t), "", "uninstall", release, "--namespace", release, "--wait", "--timeout", "5m", "--ignore-not-found")
	})
	helm.run(g, "", "install", release, "oci://"+reg.host+"/charts/toolgate", "--version", chartVersion, "--plain-http",
		"--namespace", release, "--values", valuesFile, "--wait", "--timeout", "5m")

	// The manager and the gateway run the pushed images, pulled from the registry.
	for deployment, image := range map[string]string{"toolgate-controller-manager": "toolgate", "toolgate-mcp": "toolgate-mcp"} {
		d := &appsv1.Deployment{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: release, Name: deployment}, d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(BeEquivalentTo(1), "helm install --wait waited for %s", deployment)
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(release), client.MatchingLabels(d.Spec.Selector.MatchLabels))).To(Succeed())
		g.Expect(pods.Items).NotTo(BeEmpty())
		for _, p := range pods.Items {
			expectPulled(g, reg, p, repo(image), digests[image], indexes[image])
		}
	}

	// A call to a Tool whose image is pinned the same way runs to Succeeded (its Approve rule
	// stands for the human, whose part the other tests play).
	tool := sampleTool(t, toolNS)
	tool.Spec.Approval = &tg.ApprovalPolicy{Rules: []tg.ApprovalRule{{Name: "registry-e2e", Expression: "true", Action: tg.ActionApprove}}}
	pod := &tool.Spec.JobTemplate.Spec.Template.Spec
	pod.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "regcred"}}
	pod.Containers[0].Image = repo("issue-refund") + "@" + digests["issue-refund"].String()
	pod.Containers[0].ImagePullPolicy = corev1.PullAlways
	createTool(t, g, tool)
	tc := sampleToolCall(t, toolNS)
	g.Expect(k8s.Create(ctx, tc)).To(Succeed())
	waitPhase(g, tc, tg.PhaseSucceeded, stepTimeout)
	g.Expect(tc.Status.Decision).NotTo(BeNil())
	g.Expect(tc.Status.Decision.Rule).To(Equal("registry-e2e"))
	expectReceipt(g, tc)
	_, pods := jobsAndPods(g, tc)
	expectPulled(g, reg, pods[0], repo("issue-refund"), digests["issue-refund"], indexes["issue-refund"])
}

// expectPulled checks that the Pod's container runs the image repo@index, pulled from the registry
// by the pull secret's user: the registry resolved that index and served this node's platform's
// manifest (the cluster is new: its containerd has none of the pushed manifests before).
func expectPulled(g Gomega, reg *testRegistry, p corev1.Pod, repo string, index v1.Hash, built imageIndex) {
	g.Expect(p.Spec.Containers).To(HaveLen(1))
	g.Expect(p.Spec.Containers[0].Image).To(Equal(repo+"@"+index.String()), "Pod %s names the image by digest", p.Name)
	g.Expect(p.Status.ContainerStatuses).To(HaveLen(1))
	g.Expect(p.Status.ContainerStatuses[0].ImageID).To(Equal(repo+"@"+index.String()), "Pod %s runs the pushed index", p.Name)
	path := strings.TrimPrefix(repo, reg.host)
	g.Expect(reg.served(http.MethodHead, "/v2"+path+"/manifests/"+index.String()) || reg.served(http.MethodGet, "/v2"+path+"/manifests/"+index.String())).To(BeTrue(),
		"the registry resolved %s@%s for the pull secret's user; it saw %v", repo, index, reg.requests())
	g.Expect(reg.served(http.MethodGet, "/v2"+path+"/manifests/"+built.amd64.String())).To(BeTrue(),
		"the registry served %s's linux/amd64 manifest %s; it saw %v", repo, built.amd64, reg.requests())
}

// imageIndex is one image's index as hack/image-index.sh wrote it.
type imageIndex struct {
	tag    string
	digest v1.Hash
	amd64  v1.Hash // the manifest of linux/amd64, this node's platform
	index  v1.ImageIndex
}

// buildImageIndexes runs hack/image-index.sh into dir and reads each image's index back.
func buildImageIndexes(t *testing.T, g Gomega, root, dir string) map[string]imageIndex {
	t.Helper()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), "bash", filepath.Join(root, "hack", "image-index.sh"), dir)
	cmd.Dir = root
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	g.Expect(err).NotTo(HaveOccurred(), "hack/image-index.sh: %s", stderr.String())
	indexes := map[string]imageIndex{}
	lines := bufio.NewScanner(bytes.NewReader(out))
	for lines.Scan() {
		fields := strings.Fields(lines.Text()) // toolgate/<image>:<tag> <digest> <layout>
		g.Expect(fields).To(HaveLen(3), "hack/image-index.sh printed %q", lines.Text())
		repo, tag, _ := strings.Cut(fields[0], ":")
		image := strings.TrimPrefix(repo, "toolgate/")
		p, err := layout.FromPath(fields[2])
		g.Expect(err).NotTo(HaveOccurred())
		d, err := v1.NewHash(fields[1])
		g.Expect(err).NotTo(HaveOccurred())
		idx, err := p.ImageIndex()
		g.Expect(err).NotTo(HaveOccurred())
		idx, err = idx.ImageIndex(d)
		g.Expect(err).NotTo(HaveOccurred(), "%s's layout holds its index %s", image, d)
		m, err := idx.IndexManifest()
		g.Expect(err).NotTo(HaveOccurred())
		built := imageIndex{tag: tag, digest: d, index: idx}
		for _, desc := range m.Manifests {
			if desc.Platform != nil && desc.Platform.Architecture == "amd64" {
				built.amd64 = desc.Digest
			}
		}
		g.Expect(built.amd64.Hex).NotTo(BeEmpty(), "%s has a linux/amd64 image", image)
		indexes[image] = built
	}
	rows := 0
	data, err := os.ReadFile(filepath.Join(root, "hack", "images.txt"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			rows++
		}
	}
	g.Expect(indexes).To(HaveLen(rows), "one index per row of hack/images.txt")
	return indexes
}

func mustRef(g Gomega, s string) name.Reference {
	ref, err := name.ParseReference(s, name.Insecure)
	g.Expect(err).NotTo(HaveOccurred())
	return ref
}

// testRegistry is go-containerregistry's registry behind HTTP basic auth on 127.0.0.1, recording
// what it served to whom.
type testRegistry struct {
	host, user, password string
	mu                   sync.Mutex
	log                  []servedRequest
}

type servedRequest struct {
	method, path string
	status       int
}

func (s servedRequest) String() string { return fmt.Sprintf("%s %s %d", s.method, s.path, s.status) }

func startRegistry(t *testing.T) *testRegistry {
	t.Helper()
	r := &testRegistry{user: "puller", password: rand.String(24)}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		user, password, ok := req.BasicAuth()
		if !ok || user != r.user || password != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="toolgate e2e registry"`)
			http.Error(w, "credentials required", http.StatusUnauthorized)
			return
		}
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		inner.ServeHTTP(rec, req)
		r.mu.Lock()
		r.log = append(r.log, servedRequest{method: req.Method, path: req.URL.Path, status: rec.status})
		r.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// served reports whether an authenticated request method path was answered 200.
func (r *testRegistry) served(method, path string) bool {
	for _, s := range r.requests() {
		if s.method == method && s.path == path && s.status == http.StatusOK {
			return true
		}
	}
	return false
}

func (r *testRegistry) requests() []servedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]servedRequest(nil), r.log...)
}

// pullSecret is a kubernetes.io/dockerconfigjson Secret with the registry's credentials.
func (r *testRegistry) pullSecret(g Gomega, namespace, name string) *corev1.Secret {
	cfg, err := json.Marshal(map[string]any{"auths": map[string]any{r.host: map[string]string{
		"username": r.user, "password": r.password, "auth": base64.StdEncoding.EncodeToString([]byte(r.user + ":" + r.password)),
	}}})
	g.Expect(err).NotTo(HaveOccurred())
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Type:       corev1.SecretTypeDockerConfigJson,
		Data:       map[string][]byte{corev1.DockerConfigJsonKey: cfg},
	}
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// helmCLI runs bin/helm (hack/cluster.sh builds it) with a registry configuration and caches of its
// own, against the suite's cluster.
type helmCLI struct {
	bin string
	env []string
}

func newHelmCLI(t *testing.T, g Gomega, root, work string) *helmCLI {
	t.Helper()
	bin := filepath.Join(root, "bin", "helm")
	_, err := os.Stat(bin)
	g.Expect(err).NotTo(HaveOccurred(), "bin/helm (hack/cluster.sh up builds it)")
	home := filepath.Join(work, "helm")
	return &helmCLI{bin: bin, env: append(os.Environ(),
		"HELM_REGISTRY_CONFIG="+filepath.Join(home, "registry.json"), "HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"), "HELM_DATA_HOME="+filepath.Join(home, "data"))}
}

// run runs helm with args and input as its standard input.
func (h *helmCLI) run(g Gomega, input string, args ...string) {
	cmd := exec.Command(h.bin, args...)
	cmd.Env = h.env
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "helm %s:\n%s", strings.Join(args, " "), out)
}
