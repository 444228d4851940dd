//go:build e2e

// Package e2e tests Toolgate installed the way users install it, on the single-node cluster of
// hack/cluster.sh (real kubelet, containerd, runc, kube-proxy): the manager runs as a Pod from
// config/default, the reference provider as a Pod behind its Service, and every approved call runs the
// demo tool (cmd/issue-refund) in a real container. `make test-e2e` starts the cluster, installs
// Toolgate (dist/install.yaml through config/dev) and runs this suite with KUBECONFIG and TOOLGATE_E2E_CLUSTER_DIR set.
//
// The tests run one after another: some kill the manager.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

const (
	systemNamespace = "toolgate-system"
	managerLabel    = "control-plane"
	// The reference provider's Service (config/dev/reference_provider.yaml).
	providerURL = "http://10.96.0.10:8085"
	// How long a step on the cluster may take; generous for a loaded 2-core machine.
	stepTimeout = 2 * time.Minute
	// A force-deleted leader's Lease must expire before a new manager leads: 15s plus its retries.
	failoverTimeout = 3 * time.Minute
)

var (
	k8s        client.Client
	restConfig *rest.Config
	clusterDir string
)

func TestMain(m *testing.M) {
	clusterDir = os.Getenv("TOOLGATE_E2E_CLUSTER_DIR")
	if clusterDir == "" || os.Getenv("KUBECONFIG") == "" {
		fmt.Fprintln(os.Stderr, "test/e2e: set KUBECONFIG and TOOLGATE_E2E_CLUSTER_DIR (make test-e2e does: it starts the local cluster and installs Toolgate first)")
		os.Exit(2)
	}
	var err error
	restConfig, err = clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = tg.AddToScheme(scheme)
	if k8s, err = client.New(restConfig, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// newNamespace creates a namespace for one test, deleted at its end.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + rand.String(6)}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// sampleTool returns config/samples' Tool in namespace ns, its container's environment extended by env.
func sampleTool(t *testing.T, ns string, env ...corev1.EnvVar) *tg.Tool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "v1alpha1_tool.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tool := &tg.Tool{}
	if err := yaml.UnmarshalStrict(data, tool); err != nil {
		t.Fatal(err)
	}
	tool.Namespace = ns
	if len(env) > 0 {
		c := &tool.Spec.JobTemplate.Spec.Template.Spec.Containers[0]
		c.Env = append(c.Env, env...)
	}
	return tool
}

// sampleToolCall returns config/samples' ToolCall in namespace ns.
func sampleToolCall(t *testing.T, ns string) *tg.ToolCall {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "v1alpha1_toolcall.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tc := &tg.ToolCall{}
	if err := yaml.UnmarshalStrict(data, tc); err != nil {
		t.Fatal(err)
	}
	tc.Namespace = ns
	return tc
}

// createTool creates the Tool and waits until the manager knows it: a ToolCall created before that
// would end Rejected (UnknownTool). A probe ToolCall with invalid arguments ends Rejected for its
// arguments only once the manager has read the Tool, without any approval request.
func createTool(t *testing.T, g Gomega, tool *tg.Tool) {
	t.Helper()
	ctx := context.Background()
	g.Expect(k8s.Create(ctx, tool)).To(Succeed())
	g.Eventually(func(g Gomega) {
		probe := &tg.ToolCall{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: tool.Namespace},
			Spec: tg.ToolCallSpec{Tool: tool.Spec.ToolName, Arguments: mustRaw(g, map[string]any{"payment_id": ""}),
				WaitingLimit: metav1.Duration{Duration: time.Minute}},
		}
		g.Expect(k8s.Create(ctx, probe)).To(Succeed())
		defer func() { _ = k8s.Delete(ctx, probe) }()
		g.Eventually(func() tg.ToolCallPhase { return get(g, probe).Status.Phase }).
			WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(tg.PhaseRejected))
		g.Expect(probe.Status.Reason).To(Equal(tg.ReasonInvalidArguments), "the manager does not know Tool %s yet", tool.Name)
	}).WithTimeout(stepTimeout).Should(Succeed())
}

func get(g Gomega, tc *tg.ToolCall) *tg.ToolCall {
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(tc), tc)).To(Succeed())
	return tc
}

// waitPhase waits for the ToolCall to reach phase; any other terminal phase fails at once.
func waitPhase(g Gomega, tc *tg.ToolCall, phase tg.ToolCallPhase, timeout time.Duration) {
	g.Eventually(func(g Gomega) {
		get(g, tc)
		if tc.Status.Phase != phase && isTerminal(tc.Status.Phase) {
			StopTrying(fmt.Sprintf("ToolCall %s ended %s (%s: %s), want %s", tc.Name, tc.Status.Phase, tc.Status.Reason, tc.Status.Message, phase)).Now()
		}
		g.Expect(tc.Status.Phase).To(Equal(phase))
	}).WithTimeout(timeout).WithPolling(250 * time.Millisecond).Should(Succeed())
}

func isTerminal(p tg.ToolCallPhase) bool {
	switch p {
	case tg.PhaseSucceeded, tg.PhaseFailed, tg.PhaseDenied, tg.PhaseExpired, tg.PhaseApprovalUnavailable, tg.PhaseCancelled, tg.PhaseRejected:
		return true
	}
	return false
}

func mustRaw(g Gomega, v any) runtime.RawExtension {
	data, err := json.Marshal(v)
	g.Expect(err).NotTo(HaveOccurred())
	return runtime.RawExtension{Raw: data}
}

// jobsAndPods lists the Jobs and Pods Toolgate created to run the ToolCall's tool (not its preview's:
// previewJobs lists those).
func jobsAndPods(g Gomega, tc *tg.ToolCall) ([]batchv1.Job, []corev1.Pod) {
	return labelledJobsAndPods(g, tc, "!"+tg.LabelPreview)
}

// previewJobs lists the Jobs and Pods of the ToolCall's preview.
func previewJobs(g Gomega, tc *tg.ToolCall) ([]batchv1.Job, []corev1.Pod) {
	return labelledJobsAndPods(g, tc, tg.LabelPreview+"=true")
}

func labelledJobsAndPods(g Gomega, tc *tg.ToolCall, preview string) ([]batchv1.Job, []corev1.Pod) {
	ctx := context.Background()
	s, err := labels.Parse(tg.LabelToolCallUID + "=" + string(tc.UID) + "," + preview)
	g.Expect(err).NotTo(HaveOccurred())
	sel := client.MatchingLabelsSelector{Selector: s}
	jobs := &batchv1.JobList{}
	g.Expect(k8s.List(ctx, jobs, client.InNamespace(tc.Namespace), sel)).To(Succeed())
	pods := &corev1.PodList{}
	g.Expect(k8s.List(ctx, pods, client.InNamespace(tc.Namespace), sel)).To(Succeed())
	return jobs.Items, pods.Items
}

// decide approves (validFor > 0) or denies the ToolCall's request through the reference provider's
// admin API, as a human on its approval page would.
func decide(g Gomega, tc *tg.ToolCall, approve bool, validFor string) {
	body := map[string]string{"status": "denied", "note": "e2e: not a duplicate charge"}
	if approve {
		body = map[string]string{"status": "approved", "note": "e2e: duplicate charge confirmed", "valid_for": validFor}
	}
	providerCall(g, http.MethodPost, "/admin/v1/requests/"+tc.Status.RequestID+"/decide", body)
}

// providerRequest reads a request from the provider through its admin API, which sees the requests
// of every instance (a call's request belongs to the instance of its provider object).
func providerRequest(g Gomega, id string) map[string]any {
	for _, r := range providerRequests(g, "") {
		if r["id"] == id {
			return r
		}
	}
	g.Expect(id).To(BeEmpty(), "the provider has no request %s", id)
	return nil
}

// providerRequests lists the provider's requests (GET /admin/v1/requests), of one instance if
// instance is not empty. Each carries its instance_id.
func providerRequests(g Gomega, instance string) []map[string]any {
	path := "/admin/v1/requests"
	if instance != "" {
		path += "?instance=" + instance
	}
	var out []map[string]any
	g.Expect(json.Unmarshal(providerCallRaw(g, http.MethodGet, path, nil), &out)).To(Succeed())
	return out
}

// providerRequestsAs lists the provider's requests as one of the approvers hack/cluster.sh made.
func providerRequestsAs(g Gomega, approver string) []map[string]any {
	var out []map[string]any
	g.Expect(json.Unmarshal(providerCallAs(g, approver+"-credential", http.MethodGet, "/admin/v1/requests", nil), &out)).To(Succeed())
	return out
}

// providerCall calls the reference provider's Service from this machine with the admin credential
// `hack/cluster.sh install` generated, and decodes the answer as an object.
func providerCall(g Gomega, method, path string, body any) map[string]any {
	var m map[string]any
	g.Expect(json.Unmarshal(providerCallRaw(g, method, path, body), &m)).To(Succeed())
	return m
}

// providerCallRaw is providerCall's exchange: it expects 200 and returns the body.
func providerCallRaw(g Gomega, method, path string, body any) []byte {
	return providerCallAs(g, "provider-admin-credential", method, path, body)
}

// providerCallAs is providerCallRaw with the credential in the cluster directory's file credFile.
func providerCallAs(g Gomega, credFile, method, path string, body any) []byte {
	cred, err := os.ReadFile(filepath.Join(clusterDir, credFile))
	g.Expect(err).NotTo(HaveOccurred())
	var in io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		g.Expect(err).NotTo(HaveOccurred())
		in = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, providerURL+path, in)
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(cred)))
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	out, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s %s: %s", method, path, out)
	return out
}

// submit creates the sample ToolCall and waits until a human is asked.
func submit(t *testing.T, g Gomega, ns string) *tg.ToolCall {
	t.Helper()
	tc := sampleToolCall(t, ns)
	g.Expect(k8s.Create(context.Background(), tc)).To(Succeed())
	waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
	g.Expect(tc.Status.RequestID).NotTo(BeEmpty())
	return tc
}

// expectReceipt checks that status.result is the demo tool's receipt for the sample's arguments,
// written by exactly one container that ran to completion.
func expectReceipt(g Gomega, tc *tg.ToolCall) {
	var receipt map[string]any
	g.Expect(json.Unmarshal([]byte(tc.Status.Result), &receipt)).To(Succeed(), "status.result %q", tc.Status.Result)
	g.Expect(receipt).To(HaveKeyWithValue("payment_id", "payment_123"))
	g.Expect(receipt).To(HaveKeyWithValue("amount", BeNumerically("==", 4900)))
	g.Expect(receipt).To(HaveKeyWithValue("currency", "GBP"))
	g.Expect(receipt).To(HaveKeyWithValue("status", "issued"))
	g.Expect(receipt).To(HaveKeyWithValue("refund_id", HavePrefix("rf_")))

	jobs, pods := jobsAndPods(g, tc)
	g.Expect(jobs).To(HaveLen(1), "one Job per ToolCall")
	g.Expect(pods).To(HaveLen(1), "the tool ran once")
	pod := pods[0]
	g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
	g.Expect(pod.Spec.NodeName).To(Equal("toolgate-node"))
	g.Expect(pod.Status.ContainerStatuses).To(HaveLen(1))
	term := pod.Status.ContainerStatuses[0].State.Terminated
	g.Expect(term).NotTo(BeNil())
	g.Expect(term.ExitCode).To(BeZero())
	g.Expect(term.ContainerID).To(HavePrefix("containerd://"), "a container the runtime ran")
	g.Expect(term.Message).To(Equal(tc.Status.Result), "status.result is what the container wrote to its termination log")
}

// managerPods returns the manager's Pods that are not being deleted.
func managerPods(g Gomega) []corev1.Pod {
	pods := &corev1.PodList{}
	g.Expect(k8s.List(context.Background(), pods, client.InNamespace(systemNamespace), client.MatchingLabels{managerLabel: "controller-manager"})).To(Succeed())
	var live []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live
}

// leader returns the holder of the manager's leader-election Lease (a Pod name plus a suffix).
func leader(g Gomega) string {
	lease := &coordinationv1.Lease{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: "toolgate.dev"}, lease)).To(Succeed())
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// killLeader force-deletes the manager Pod holding the Lease (the kubelet kills its container at
// once; nothing releases the Lease) and returns its name.
func killLeader(t *testing.T, g Gomega) string {
	t.Helper()
	var victim string
	g.Eventually(func(g Gomega) {
		holder := leader(g)
		for _, p := range managerPods(g) {
			if strings.HasPrefix(holder, p.Name+"_") {
				victim = p.Name
			}
		}
		g.Expect(victim).NotTo(BeEmpty(), "no running manager Pod holds the Lease (holder %q)", holder)
	}).WithTimeout(failoverTimeout).Should(Succeed())
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: systemNamespace, Name: victim}}
	g.Expect(k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0))).To(Succeed())
	t.Logf("force-deleted the leading manager Pod %s", victim)
	return victim
}

// waitManagerReady waits until the Deployment has its replicas ready.
func waitManagerReady(g Gomega) {
	g.Eventually(func(g Gomega) {
		d := &appsv1.Deployment{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: systemNamespace, Name: "toolgate-controller-manager"}, d)).To(Succeed())
		g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(managerPods(g)).To(HaveLen(int(*d.Spec.Replicas)))
	}).WithTimeout(failoverTimeout).WithPolling(time.Second).Should(Succeed())
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
