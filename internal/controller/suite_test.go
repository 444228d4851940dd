package controller_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/controller"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/provider/reference"
	"toolgate.dev/toolgate/internal/testenv"
)

var (
	cfg       *rest.Config
	k8s       client.Client
	nsCounter int
)

func TestMain(m *testing.M) {
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.UseDevMode(true), zap.Level(zapLevel())))
	env, err := testenv.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cfg = env.Config
	k8s, err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

func zapLevel() zapcore.Level {
	if os.Getenv("TOOLGATE_TEST_VERBOSE") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

const credential = "test-instance-credential"

// harness is one scenario's world: a namespace on the real apiserver, the reference provider on a
// real loopback socket, and a Toolgate manager (which can be stopped and started again).
type harness struct {
	t        *testing.T
	g        *WithT
	ns       string
	srv      *reference.Server
	url      string
	credFile string
	opts     controller.Options

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

type option func(*harness)

func withClock(c clock.PassiveClock) option { return func(h *harness) { h.opts.Clock = c } }
func withPollWait(d time.Duration) option   { return func(h *harness) { h.opts.PollWait = d } }
func withWorkers(n int) option              { return func(h *harness) { h.opts.MaxConcurrentReconciles = n } }
func withCancelGiveUp(d time.Duration) option {
	return func(h *harness) { h.opts.CancelGiveUp = d }
}

// testTiming: the design's margins, shortened so that limits are reached within a test.
func testTiming() controller.Timing {
	return controller.Timing{ReturnMargin: time.Second, FinalStateMargin: 2 * time.Second, SkewMargin: time.Second, SubmitAllowance: time.Second}
}

func newHarness(t *testing.T, opts ...option) *harness {
	t.Helper()
	g := NewWithT(t)
	nsCounter++
	h := &harness{t: t, g: g, ns: fmt.Sprintf("tc-%d-%s", nsCounter, strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-")))}
	if len(h.ns) > 60 {
		h.ns = h.ns[:60]
	}
	h.ns = strings.TrimRight(strings.ReplaceAll(h.ns, "_", "-"), "-")
	g.Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: h.ns}})).To(Succeed())

	srv, err := reference.New(reference.Options{Credential: credential})
	g.Expect(err).NotTo(HaveOccurred())
	h.srv = srv
	h.url, err = srv.Start("127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { _ = srv.Close() })

	h.credFile = filepath.Join(t.TempDir(), "credential")
	g.Expect(os.WriteFile(h.credFile, []byte(credential+"\n"), 0o600)).To(Succeed())
	pc, err := provider.NewHTTPClient(provider.Options{
		BaseURL: h.url, CredentialFile: h.credFile,
		BackoffBase: 20 * time.Millisecond, BackoffCap: 500 * time.Millisecond,
		RequestTimeout: 5 * time.Second, OnError: controller.CountProviderError,
	})
	g.Expect(err).NotTo(HaveOccurred())
	h.opts = controller.Options{
		Provider:           pc,
		PollWait:           2 * time.Second,
		Timing:             testTiming(),
		CallTimeout:        5 * time.Second,
		CancelGiveUp:       30 * time.Second,
		Namespaces:         []string{h.ns},
		SkipNameValidation: true,
		MetricsBindAddress: "0",
	}
	for _, o := range opts {
		o(h)
	}
	h.start()
	t.Cleanup(h.stopManager)
	return h
}

// start runs a new manager.
func (h *harness) start() {
	h.t.Helper()
	mgr, err := controller.NewManager(cfg, h.opts)
	h.g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// An error after a requested stop (e.g. caches still syncing) is the stop itself, not a failure.
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			h.t.Errorf("manager: %v", err)
		}
	}()
	h.mu.Lock()
	h.stop, h.done = cancel, done
	h.mu.Unlock()
}

// stopManager stops the running manager and waits until it has stopped, as a process exit would.
func (h *harness) stopManager() {
	h.mu.Lock()
	stop, done := h.stop, h.done
	h.stop, h.done = nil, nil
	h.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// restart stops the manager and starts a new one with the same options (minus any crash point).
func (h *harness) restart() {
	h.stopManager()
	h.opts.Crash = nil
	h.start()
}

// newClockedHarness is a harness whose controller clock the test moves, with the refund Tool.
func newClockedHarness(t *testing.T) (*harness, *clocktesting.FakePassiveClock) {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(time.Now())
	h := newHarness(t, withClock(clk))
	h.tool("issue-refund", "issue_refund", "")
	return h, clk
}

func (h *harness) tool(name, toolName string, schema string, mutate ...func(*tg.Tool)) *tg.Tool {
	h.t.Helper()
	tool := &tg.Tool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
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
	h.g.Expect(k8s.Create(context.Background(), tool)).To(Succeed())
	return tool
}

const refundSchema = `{"type":"object","required":["payment_id","amount","currency"],"properties":{"payment_id":{"type":"string"},"amount":{"type":"integer","minimum":1},"currency":{"enum":["GBP","EUR","USD"]}},"additionalProperties":false}`

const refundArgs = `{"payment_id":"payment_123","amount":4900,"currency":"GBP"}`

func (h *harness) toolCall(name, tool, args string, waitingLimit time.Duration, timeout *time.Duration) *tg.ToolCall {
	h.t.Helper()
	tc := &tg.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.ns},
		Spec: tg.ToolCallSpec{
			Tool:         tool,
			Arguments:    runtime.RawExtension{Raw: []byte(args)},
			WaitingLimit: metav1.Duration{Duration: waitingLimit},
		},
	}
	if timeout != nil {
		tc.Spec.Timeout = &metav1.Duration{Duration: *timeout}
	}
	h.g.Expect(k8s.Create(context.Background(), tc)).To(Succeed())
	return tc
}

func (h *harness) get(name string) *tg.ToolCall {
	tc := &tg.ToolCall{}
	h.g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: h.ns, Name: name}, tc)).To(Succeed())
	return tc
}

// waitPhase waits until the ToolCall reaches phase and returns it.
func (h *harness) waitPhase(name string, phase tg.ToolCallPhase, timeout ...time.Duration) *tg.ToolCall {
	h.t.Helper()
	limit := 30 * time.Second
	if len(timeout) > 0 {
		limit = timeout[0]
	}
	var tc *tg.ToolCall
	h.g.Eventually(func(g Gomega) tg.ToolCallPhase {
		tc = &tg.ToolCall{}
		g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: h.ns, Name: name}, tc)).To(Succeed())
		return tc.Status.Phase
	}).WithTimeout(limit).WithPolling(50*time.Millisecond).Should(Equal(phase), func() string {
		return fmt.Sprintf("ToolCall %s: reason %q, message %q", name, tc.Status.Reason, tc.Status.Message)
	})
	return tc
}

// waitGone waits until the ToolCall no longer exists (its finalizer was removed).
func (h *harness) waitGone(name string, timeout time.Duration) {
	h.t.Helper()
	h.g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(context.Background(), types.NamespacedName{Namespace: h.ns, Name: name}, &tg.ToolCall{}))
	}).WithTimeout(timeout).Should(BeTrue(), "ToolCall %s still exists", name)
}

// pendingRequest returns the provider's request for a ToolCall that is AwaitingApproval.
func (h *harness) pendingRequest(name string) provider.Request {
	h.t.Helper()
	tc := h.waitPhase(name, tg.PhaseAwaitingApproval)
	h.g.Expect(tc.Status.RequestID).NotTo(BeEmpty())
	req, err := h.srv.Get(tc.Status.RequestID)
	h.g.Expect(err).NotTo(HaveOccurred())
	return req
}

func (h *harness) approve(id string, validFor time.Duration) {
	h.t.Helper()
	exp := time.Now().Add(validFor)
	_, err := h.srv.Decide(id, provider.StatusApproved, "The duplicate charge has been confirmed.", &exp)
	h.g.Expect(err).NotTo(HaveOccurred())
}

func (h *harness) jobs() []batchv1.Job {
	list := &batchv1.JobList{}
	h.g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
	return list.Items
}

// finishJob plays the kubelet and the Job controller (envtest has neither): a Pod that terminated
// with msg, then the Job's terminal conditions.
func (h *harness) finishJob(jobName string, succeeded bool, msg string) {
	h.t.Helper()
	ctx := context.Background()
	job := &batchv1.Job{}
	h.g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: h.ns, Name: jobName}, job)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: jobName + "-pod", Namespace: h.ns, Labels: job.Spec.Template.Labels},
		Spec:       *job.Spec.Template.Spec.DeepCopy(),
	}
	h.g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	exit := int32(0)
	if !succeeded {
		exit = 1
	}
	pod.Status.Phase = corev1.PodSucceeded
	if !succeeded {
		pod.Status.Phase = corev1.PodFailed
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "tool", Image: "busybox:1.36",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exit, Message: msg}},
	}}
	h.g.Expect(k8s.Status().Update(ctx, pod)).To(Succeed())

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
	h.g.Expect(k8s.Status().Update(ctx, job)).To(Succeed())
}

// events returns the reasons of the events about a ToolCall.
func (h *harness) eventReasons(name string) []string {
	list := &eventsv1.EventList{}
	h.g.Expect(k8s.List(context.Background(), list, client.InNamespace(h.ns))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Regarding.Kind == "ToolCall" {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// metricValue reads a counter, gauge or histogram sample count from the controller-runtime registry.
func metricValue(name string, labels map[string]string) float64 {
	families, err := metrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				total += m.GetCounter().GetValue()
			case m.Gauge != nil:
				total += m.GetGauge().GetValue()
			case m.Histogram != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}
