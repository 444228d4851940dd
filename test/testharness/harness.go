// Package testharness is the world Toolgate's integration tests, chaos run and benchmarks run in: a real
// kube-apiserver and etcd (envtest) with the CRDs, a namespace per scenario, the reference approvals
// provider on a real loopback socket, and a Toolgate manager that can be stopped and started again.
package testharness

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/internal/reference/faults"
	"toolgate.dev/toolgate/test/testenv"
)

// Credential is the provider instance credential every harness uses.
const Credential = "test-instance-credential"

// ProfileEnv names the environment variable that chooses the reference provider's wire format for
// every harness of a test run: "full" (the default) or "seed" (the fewest fields AAP allows: errors
// are plain text, and requests carry only the required fields and the decision, without
// agent_reasoning or context; replays are answered 200 and DELETE /v1/requests/{id} cancels, as in
// the full profile). `make test` runs the controller scenarios once with each.
const ProfileEnv = "TOOLGATE_PROVIDER_PROFILE"

// Profile is the reference provider profile ProfileEnv chooses.
func Profile() (reference.Profile, error) {
	p, err := reference.ParseProfile(os.Getenv(ProfileEnv))
	if err != nil {
		return "", fmt.Errorf("%s: %w", ProfileEnv, err)
	}
	return p, nil
}

// RefundSchema and RefundArgs are the design's refund example.
const (
	RefundSchema = `{"type":"object","required":["payment_id","amount","currency"],"properties":{"payment_id":{"type":"string"},"amount":{"type":"integer","minimum":1},"currency":{"enum":["GBP","EUR","USD"]}},"additionalProperties":false}`
	RefundArgs   = `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`
)

// Env is a running control plane and an admin client for it.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client

	users sync.Mutex
}

// AddUser provisions a user on the environment's apiserver. envtest's certificate authority is not
// safe for concurrent use, and parallel tests share one environment: users are added one at a time.
func (e *Env) AddUser(u envtest.User) (*envtest.AuthenticatedUser, error) {
	e.users.Lock()
	defer e.users.Unlock()
	return e.Env.AddUser(u, nil)
}

// StartEnv starts envtest with the Toolgate CRDs; configure functions change the environment before
// it starts (testenv.Start).
func StartEnv(configure ...func(*envtest.Environment)) (*Env, error) {
	env, err := testenv.Start(configure...)
	if err != nil {
		return nil, err
	}
	c, err := client.New(env.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Env: env, Config: env.Config, Client: c}, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error { return e.Env.Stop() }

var nsCounter atomic.Int64

// Harness is one scenario's world.
type Harness struct {
	T        testing.TB
	G        *WithT
	Env      *Env
	K8s      client.Client
	NS       string
	Provider *reference.Server
	URL      string
	CredFile string
	// Opts are the manager's options; Start uses them as they are at the time of the call.
	Opts controllers.Options
	// NewClient, when set, builds the next manager's client (controller-runtime's NewClient option),
	// e.g. the default client wrapped with controller-runtime's interceptor to inject a fault or a crash.
	NewClient client.NewClientFunc
	// NewCache, when set, builds the next manager's cache (controller-runtime's NewCache option),
	// e.g. one whose informers hold back some watch events.
	NewCache cache.NewCacheFunc

	providerOpts reference.Options
	clientOpts   provider.Options
	// logger, when set (WithLogger), is the managers' logger.
	logger      *logr.Logger
	noManager   bool
	providerTLS *tls.Certificate
	// externalURL and externalCredential, when set, are the provider the manager's client talks to.
	externalURL, externalCredential string

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// TestTiming is the design's margins, shortened so that limits are reached within a test.
func TestTiming() controllers.Timing {
	return controllers.Timing{ReturnMargin: time.Second, FinalStateMargin: 2 * time.Second, SkewMargin: time.Second, SubmitAllowance: time.Second}
}

// New builds a harness: a fresh namespace, a reference provider on loopback, and (unless
// WithoutManager) a running manager limited to the namespace.
func New(t testing.TB, env *Env, opts ...Option) *Harness {
	t.Helper()
	g := NewWithT(t)
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(t.Name()))
	ns := fmt.Sprintf("tc-%d-%s", nsCounter.Add(1), name)
	if len(ns) > 60 {
		ns = ns[:60]
	}
	h := &Harness{T: t, G: g, Env: env, K8s: env.Client, NS: strings.TrimRight(ns, "-")}
	profile, err := Profile()
	g.Expect(err).NotTo(HaveOccurred())
	h.providerOpts = reference.Options{Credential: Credential, Profile: profile, Faults: faults.New(0)}
	h.CredFile = filepath.Join(t.TempDir(), "credential")
	h.clientOpts = provider.Options{
		CredentialFile: h.CredFile,
		BackoffBase:    20 * time.Millisecond, BackoffCap: 500 * time.Millisecond,
		RequestTimeout: 5 * time.Second, OnAttempt: controllers.CountProviderRequest, OnError: controllers.CountProviderError,
	}
	h.Opts = controllers.Options{
		PollWait:     2 * time.Second,
		Timing:       TestTiming(),
		CallTimeout:  5 * time.Second,
		CancelGiveUp: 30 * time.Second,
		Namespaces:   []string{h.NS},
		// ClusterApprovalProviders' Secrets are the test's own.
		ClusterResourceNamespace: h.NS,
		MetricsBindAddress:       "0",
	}
	for _, o := range opts {
		o(h)
	}
	g.Expect(h.K8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.NS}})).To(Succeed())

	srv, err := reference.New(h.providerOpts)
	g.Expect(err).NotTo(HaveOccurred())
	h.Provider = srv
	if h.providerTLS != nil {
		h.URL, err = srv.StartTLS("127.0.0.1:0", *h.providerTLS)
	} else {
		h.URL, err = srv.Start("127.0.0.1:0")
	}
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = srv.Close() })

	cred, base := h.providerOpts.Credential, h.URL
	if h.externalURL != "" {
		cred, base = h.externalCredential, h.externalURL
	}
	g.Expect(os.WriteFile(h.CredFile, []byte(cred+"\n"), 0o600)).To(Succeed())
	h.clientOpts.BaseURL = base
	pc, err := provider.NewHTTPClient(h.clientOpts)
	g.Expect(err).NotTo(HaveOccurred())
	h.Opts.Provider = pc
	if !h.noManager {
		h.Start()
	}
	t.Cleanup(h.StopManager)
	return h
}

// Seed reports whether the reference provider speaks the seed profile: the fewest fields AAP allows
// (no agent_reasoning or context echoed) and plain-text error bodies. It cancels (DELETE) as every
// AAP provider does.
func (h *Harness) Seed() bool { return h.Provider.Profile() == reference.ProfileSeed }

// WithdrawnStatus is the provider status of a request Toolgate withdrew (a deleted ToolCall, a
// rejected acceptance record): cancelled, in both profiles, since both implement DELETE.
func (h *Harness) WithdrawnStatus() string {
	return provider.StatusCancelled
}

// Start runs a new manager with h.Opts, built as controllers.NewManager builds it, with h.NewClient
// and h.NewCache.
func (h *Harness) Start() {
	h.T.Helper()
	mo := controllers.ManagerOptions(h.Opts)
	mo.NewClient, mo.NewCache = h.NewClient, h.NewCache
	if h.logger != nil {
		mo.Logger = *h.logger
	}
	mo.Controller.SkipNameValidation = ptr.To(true) // several managers in one test process
	mgr, err := ctrl.NewManager(h.Env.Config, mo)
	h.G.Expect(err).NotTo(HaveOccurred())
	h.G.Expect(controllers.Setup(mgr, h.Opts)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// An error after a requested stop (e.g. caches still syncing) is the stop itself, not a failure.
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			h.T.Errorf("manager: %v", err)
		}
	}()
	h.mu.Lock()
	h.stop, h.done = cancel, done
	h.mu.Unlock()
}

// StopManager stops the running manager and waits until it has stopped, as a process exit would.
func (h *Harness) StopManager() {
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.stop, h.done = nil, nil
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// Restart stops the manager and starts a new one with the same options, minus any wrapper of its
// client or cache (a test's crash or fault).
func (h *Harness) Restart() {
	h.StopManager()
	h.NewClient, h.NewCache = nil, nil
	h.Start()
}

// NewClocked is a harness whose controller clock the test moves, with the refund Tool.
func NewClocked(t testing.TB, env *Env) (*Harness, *clocktesting.FakePassiveClock) {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := New(t, env, WithClock(clk))
	h.Tool("issue-refund", "issue_refund", "")
	return h, clk
}

// Tool creates a Tool whose Job writes its arguments as the termination message.
func (h *Harness) Tool(name, toolName string, schema string, mutate ...func(*tg.Tool)) *tg.Tool {
	h.T.Helper()
	tool := &tg.Tool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS},
		Spec: tg.ToolSpec{
			ToolName:         toolName,
			ExecutionTimeout: &metav1.Duration{Duration: 5 * time.Second},
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "tool", Image: "busybox:1.36", Command: []string{"sh", "-c", "echo \"$TOOL_ARGUMENTS\" > /dev/termination-log"}}},
			}}}},
		},
	}
	if schema != "" {
		tool.Spec.ArgumentsSchema = &apiextensionsv1.JSON{Raw: []byte(schema)}
	}
	for _, m := range mutate {
		m(tool)
	}
	h.G.Expect(h.K8s.Create(context.Background(), tool)).To(Succeed())
	return tool
}

// NewToolCall returns a ToolCall object in the harness namespace, not yet created.
func (h *Harness) NewToolCall(name, tool, args string, waitingLimit time.Duration, timeout *time.Duration) *tg.ToolCall {
	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.NS},
		Spec: tg.ToolCallSpec{
			Tool:         tool,
			Arguments:    runtime.RawExtension{Raw: []byte(args)},
			WaitingLimit: metav1.Duration{Duration: waitingLimit},
		},
	}
	if timeout != nil {
		tc.Spec.Timeout = &metav1.Duration{Duration: *timeout}
	}
	return tc
}

// ToolCall creates a ToolCall.
func (h *Harness) ToolCall(name, tool, args string, waitingLimit time.Duration, timeout *time.Duration) *tg.ToolCall {
	h.T.Helper()
	tc := h.NewToolCall(name, tool, args, waitingLimit, timeout)
	h.G.Expect(h.K8s.Create(context.Background(), tc)).To(Succeed())
	return tc
}

// Get reads a ToolCall from the apiserver.
func (h *Harness) Get(name string) *tg.ToolCall {
	h.T.Helper()
	tc := &tg.ToolCall{}
	h.G.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, tc)).To(Succeed())
	return tc
}

// WaitPhase waits until the ToolCall reaches phase (30s unless a timeout is given) and returns it.
func (h *Harness) WaitPhase(name string, phase tg.ToolCallPhase, timeout ...time.Duration) *tg.ToolCall {
	h.T.Helper()
	limit := 30 * time.Second
	if len(timeout) > 0 {
		limit = timeout[0]
	}
	var tc *tg.ToolCall
	h.G.Eventually(func(g Gomega) tg.ToolCallPhase {
		tc = &tg.ToolCall{}
		g.Expect(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, tc)).To(Succeed())
		return tc.Status.Phase
	}).WithTimeout(limit).WithPolling(50*time.Millisecond).Should(Equal(phase), func() string {
		return fmt.Sprintf("ToolCall %s: reason %q, message %q", name, tc.Status.Reason, tc.Status.Message)
	})
	return tc
}

// WaitGone waits until the ToolCall no longer exists (its finalizer was removed).
func (h *Harness) WaitGone(name string, timeout time.Duration) {
	h.T.Helper()
	h.G.Eventually(func() bool {
		return apierrors.IsNotFound(h.K8s.Get(context.Background(), types.NamespacedName{Namespace: h.NS, Name: name}, &tg.ToolCall{}))
	}).WithTimeout(timeout).Should(BeTrue(), "ToolCall %s still exists", name)
}

// PendingRequest returns the provider's request for a ToolCall once it is AwaitingApproval.
func (h *Harness) PendingRequest(name string) provider.Request {
	h.T.Helper()
	tc := h.WaitPhase(name, tg.PhaseAwaitingApproval)
	h.G.Expect(tc.Status.RequestID).NotTo(BeEmpty())
	req, err := h.Provider.Get(tc.Status.RequestID)
	h.G.Expect(err).NotTo(HaveOccurred())
	return req
}

// Approve approves a provider request, valid for validFor from now.
func (h *Harness) Approve(id string, validFor time.Duration) {
	h.T.Helper()
	exp := time.Now().Add(validFor)
	_, err := h.Provider.Decide(id, provider.StatusApproved, "The duplicate charge has been confirmed.", &exp)
	h.G.Expect(err).NotTo(HaveOccurred())
}

// Jobs lists the Jobs in the harness namespace.
func (h *Harness) Jobs() []batchv1.Job {
	h.T.Helper()
	list := &batchv1.JobList{}
	h.G.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
	return list.Items
}

// FinishJob plays the kubelet and the Job controller (envtest has neither): a Pod that terminated
// with msg, then the Job's terminal conditions.
func (h *Harness) FinishJob(jobName string, succeeded bool, msg string) {
	h.T.Helper()
	h.G.Expect(FinishJob(context.Background(), h.K8s, h.NS, jobName, succeeded, msg)).To(Succeed())
}

// ApproveAndFinish approves the ToolCall's request (valid for 5 minutes), then plays the kubelet for
// its Job (see FinishJob). It returns the ToolCall as it was when Running.
func (h *Harness) ApproveAndFinish(name string, succeeded bool, msg string) *tg.ToolCall {
	h.T.Helper()
	h.Approve(h.PendingRequest(name).ID, 5*time.Minute)
	running := h.WaitPhase(name, tg.PhaseRunning)
	h.FinishJob(running.Status.JobName, succeeded, msg)
	return running
}

// FinishJob is Harness.FinishJob for callers without a harness (the benchmarks' simulated kubelet).
func FinishJob(ctx context.Context, c client.Client, ns, jobName string, succeeded bool, msg string) error {
	job := &batchv1.Job{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: jobName}, job); err != nil {
		return err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: jobName + "-pod", Namespace: ns, Labels: job.Spec.Template.Labels,
			// Owned by the Job, as the Job controller makes them: the manager reads only the Job's own Pods.
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(job, batchv1.SchemeGroupVersion.WithKind("Job"))}},
		Spec: *job.Spec.Template.Spec.DeepCopy(),
	}
	if err := c.Create(ctx, pod); apierrors.IsAlreadyExists(err) {
		// A repeated call (the first one failed later on): finish the Pod it created.
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	exit := int32(0)
	pod.Status.Phase = corev1.PodSucceeded
	if !succeeded {
		exit = 1
		pod.Status.Phase = corev1.PodFailed
	}
	// The kubelet reports each container under its own name: the template's first is the tool's.
	tool := pod.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: tool.Name, Image: tool.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}},
	}}
	if err := c.Status().Update(ctx, pod); err != nil {
		return err
	}

	now := metav1.Now()
	job.Status.StartTime = &now
	if succeeded {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastTransitionTime: now, Reason: "BackoffLimitExceeded"},
		}
	}
	return c.Status().Update(ctx, job)
}

// EventReasons returns the reasons of the events about a ToolCall.
func (h *Harness) EventReasons(name string) []string {
	h.T.Helper()
	list := &eventsv1.EventList{}
	h.G.Expect(h.K8s.List(context.Background(), list, client.InNamespace(h.NS))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "ToolCall" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}
