package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/procfs"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

// Asynchronous mode (AAP webhooks): the manager runs its receiver over HTTPS (a test CA) on
// loopback, the calls go to an ApprovalProvider with spec.provisioning and spec.delivery, and the
// reference provider notifies the receiver of each decision instead of answering long polls.

// certValidity is how long the benchmark's CAs and certificates stay valid: a run at 100,000 pending
// can outlast testcert's default hour.
const certValidity = 12 * time.Hour

// asyncProvider is the ApprovalProvider the asynchronous mode's calls use.
const asyncProvider = "bench-async"

// provisionerToken is the reference provider's provisioner token in asynchronous mode.
const provisionerToken = "bench-provisioner-token"

// receiver is the manager's webhook receiver: the options that let the reference provider deliver
// to it, the manager's flags that serve it, and its URL.
type receiver struct {
	opt  th.Option
	args []string
	url  string
}

// newReceiver writes a certificate for 127.0.0.1 from a CA of its own into a directory and picks a
// free loopback port for the receiver.
func newReceiver(b *testing.B) receiver {
	g := NewWithT(b)
	ca := testcert.NewCAValidFor(b, "bench receiver CA", certValidity)
	dir := b.TempDir()
	testcert.WriteKeyPair(b, dir, ca.ServerCert(b))
	addr, err := th.FreeAddr()
	g.Expect(err).NotTo(HaveOccurred())
	return receiver{
		opt: th.WithProvider(func(o *reference.Options) {
			o.ProvisionerToken = provisionerToken
			o.AllowedWebhookNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			o.WebhookRootCAs = ca.Pool()
		}),
		args: []string{"--receiver-bind-address", addr, "--receiver-cert-dir", dir},
		url:  "https://" + addr + controllers.ReceiverPath,
	}
}

// startDelivery creates the asynchronous mode's ApprovalProvider (provisioning, delivery to the
// receiver, the provider's CA when it serves HTTPS), waits until the provider has registered the
// receiver, and returns the mutation that points a Tool at it.
func startDelivery(b *testing.B, h *th.Harness, r receiver, providerCA []byte) func(*tg.Tool) {
	ctx := context.Background()
	h.G.Expect(h.K8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "bench-provisioner", Namespace: h.NS, Labels: map[string]string{tg.LabelProvider: asyncProvider}},
		StringData: map[string]string{"token": provisionerToken}})).To(Succeed())
	ap := &tg.ApprovalProvider{
		ObjectMeta: metav1.ObjectMeta{Name: asyncProvider, Namespace: h.NS},
		Spec: tg.ApprovalProviderSpec{URL: h.URL, CABundle: providerCA, AllowInsecureHTTP: providerCA == nil,
			Provisioning: &tg.Provisioning{ProvisionerTokenSecretRef: tg.SecretKeyRef{Name: "bench-provisioner", Key: "token"}},
			Delivery:     &tg.Delivery{ReceiverURL: r.url}},
	}
	h.G.Expect(h.K8s.Create(ctx, ap)).To(Succeed())
	h.G.Eventually(func(g Gomega) {
		g.Expect(h.K8s.Get(ctx, types.NamespacedName{Namespace: h.NS, Name: asyncProvider}, ap)).To(Succeed())
		c := meta.FindStatusCondition(ap.Status.Conditions, tg.ConditionDelivery)
		g.Expect(c).NotTo(BeNil(), "the Delivery condition")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
		g.Expect(c.ObservedGeneration).To(Equal(ap.Generation))
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(Succeed(), "the receiver registered at the provider")
	return func(t *tg.Tool) {
		t.Spec.ProviderRef = &tg.ProviderRef{Kind: tg.KindApprovalProvider, Name: asyncProvider}
	}
}

// configureControlPlane makes room in envtest's etcd for the largest runs: 100,000 ToolCalls, their
// Events and the revisions the apiserver has not compacted yet outgrow etcd's default 2 GiB quota.
func configureControlPlane(e *envtest.Environment) {
	if e.ControlPlane.Etcd == nil {
		e.ControlPlane.Etcd = &envtest.Etcd{}
	}
	e.ControlPlane.Etcd.Configure().Set("quota-backend-bytes", fmt.Sprint(int64(8)<<30))
	if *apiserverLog != "" {
		f, err := os.Create(*apiserverLog)
		if err != nil {
			panic(err)
		}
		if e.ControlPlane.APIServer == nil {
			e.ControlPlane.APIServer = &envtest.APIServer{}
		}
		e.ControlPlane.APIServer.Out, e.ControlPlane.APIServer.Err = f, f
		e.ControlPlane.APIServer.Configure().Set("v", "2")
	}
}

// controlPlaneRSS reads the resident memory (VmRSS) of envtest's kube-apiserver and etcd: the
// processes of those names this test process started.
func controlPlaneRSS() (apiserver, etcd int64, err error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, 0, err
	}
	self := os.Getpid()
	found := 0
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PPID != self {
			continue
		}
		var into *int64
		switch st.Comm {
		case "kube-apiserver":
			into = &apiserver
		case "etcd":
			into = &etcd
		default:
			continue
		}
		s, err := p.NewStatus()
		if err != nil {
			return 0, 0, err
		}
		*into = int64(s.VmRSS)
		found++
	}
	if found != 2 {
		return apiserver, etcd, fmt.Errorf("found %d of envtest's kube-apiserver and etcd among this process's children", found)
	}
	return apiserver, etcd, nil
}

// controlPlaneMemory is the control plane's memory at one moment.
type controlPlaneMemory struct{ apiserver, etcd int64 }

func readControlPlane(b *testing.B) controlPlaneMemory {
	a, e, err := controlPlaneRSS()
	if err != nil {
		b.Logf("control plane memory: %v", err)
	}
	return controlPlaneMemory{a, e}
}

// cells are "total (+growth)" in MiB, for the apiserver and for etcd: the memory now, and how much
// it grew (or shrank) since before.
func (m controlPlaneMemory) cells(before controlPlaneMemory) string {
	f := func(now, was int64) string {
		return fmt.Sprintf("%.0f (%+.0f)", float64(now)/(1<<20), float64(now-was)/(1<<20))
	}
	return f(m.apiserver, before.apiserver) + " | " + f(m.etcd, before.etcd)
}

// clearNamespace removes what a pending run left in its namespace (its manager is gone): the
// ToolCalls (their finalizers taken off), Jobs and Events, so that the next run's apiserver and etcd
// do not carry them. envtest has no namespace controller, so deleting the namespace would not.
func clearNamespace(b *testing.B, h *th.Harness, names []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	var failed atomic.Int64
	workqueue.ParallelizeUntil(ctx, 32, len(names), func(i int) {
		tc := &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: h.NS, Name: names[i]}}
		err := h.K8s.Patch(ctx, tc, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		if err == nil || apierrors.IsNotFound(err) {
			err = client.IgnoreNotFound(h.K8s.Delete(ctx, tc))
		}
		if err != nil {
			failed.Add(1)
		}
	})
	if err := h.K8s.DeleteAllOf(ctx, &corev1.Event{}, client.InNamespace(h.NS)); err != nil {
		b.Logf("clearing Events: %v", err)
	}
	if err := h.K8s.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(h.NS), client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil {
		b.Logf("clearing Jobs: %v", err)
	}
	b.Logf("cleared %d ToolCalls (%d failed), their Jobs and Events in %s", len(names), failed.Load(), time.Since(start).Round(time.Second))
}

// pendingCase is one run of BenchmarkPending.
type pendingCase struct {
	mode string
	n    int
}

// pendingCases are the runs, in order: every mode of -bench.modes with every size of -bench.sizes,
// where a size written "mode:N" is run for that mode alone.
func pendingCases() []pendingCase {
	var out []pendingCase
	for _, mode := range strings.Split(*modesFlag, ",") {
		mode = strings.TrimSpace(mode)
		for _, s := range strings.Split(*sizesFlag, ",") {
			s = strings.TrimSpace(s)
			if m, size, ok := strings.Cut(s, ":"); ok {
				if m != mode {
					continue
				}
				s = size
			}
			if n, err := strconv.Atoi(s); err == nil && n > 0 {
				out = append(out, pendingCase{mode, n})
			}
		}
	}
	return out
}

// caseName is a pending run's sub-benchmark name.
func caseName(mode string, n int) string { return fmt.Sprintf("mode=%s/N=%d", mode, n) }
