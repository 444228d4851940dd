// Package bench measures Toolgate's event-driven long-poll design against the baseline most
// Kubernetes approval controllers use (requeue the object and read the provider every 5s), and
// AAP's asynchronous mode (the provider notifies the manager's webhook receiver), in one run, on one
// machine: envtest's apiserver, the reference provider on loopback, and the manager as its own
// process (so its memory is its own).
//
//	make bench                                   # all sizes, writes docs/performance.md
//	go test ./test/bench/ -run '^$' -bench . -benchtime 1x -args -bench.sizes=100 -bench.modes=longpoll,async
package bench

import (
	"bytes"
	"context"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap/zapcore"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers"
	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
	"toolgate.dev/toolgate/test/testcert"
	th "toolgate.dev/toolgate/test/testharness"
)

var (
	sizesFlag    = flag.String("bench.sizes", "100,1000,10000,async:100000", "numbers of pending ToolCalls, for every mode, or for one mode alone when written mode:N")
	modesFlag    = flag.String("bench.modes", "longpoll,requeue,async", "designs to measure: longpoll (Toolgate, synchronous), requeue (the baseline) and async (Toolgate with AAP webhooks); the throughput run takes longpoll and requeue")
	window       = flag.Duration("bench.window", time.Minute, "steady-state window over which provider requests and writes are counted")
	decisions    = flag.Int("bench.decisions", 1000, "approvals whose decision-to-Job latency is measured (at most N), arriving at 20 a second on average")
	throughputN  = flag.Int("bench.throughput", 1000, "ToolCalls in the end-to-end throughput run")
	workers      = flag.Int("bench.workers", 32, "manager reconcile workers (--max-concurrent-reconciles)")
	useTLS       = flag.Bool("bench.tls", true, "serve the provider over HTTPS with HTTP/2 (false: plain HTTP/1.1)")
	pprofDir     = flag.String("bench.pprof", "", "directory to save profiles in: the manager's heap at the end of each steady window and after the decisions, its CPU over the decisions, and in the throughput run the manager's and the apiserver's CPU")
	writeDoc     = flag.String("bench.write", "", "file whose bench section is replaced with the results table")
	apiserverLog = flag.String("bench.apiserver-log", "", "file to write envtest's kube-apiserver log to (at -v=2)")
)

var (
	env                 *th.Env
	results             []string
	thrRows             []string
	ceiling, crdCeiling float64
)

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run()) // no benchmark selected (go test ./...): no cluster needed
	}
	logf.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.ErrorLevel)))
	var err error
	env, err = th.StartEnv(configureControlPlane)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	if code == 0 && len(results)+len(thrRows) > 0 {
		table := report()
		fmt.Println(table)
		if *writeDoc != "" {
			if err := replaceSection(*writeDoc, table); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

func modeArgs(mode string) []string {
	args := []string{"--max-concurrent-reconciles", strconv.Itoa(*workers)}
	if mode == "requeue" {
		args = append(args, "--poll-wait", "5s") // the baseline's requeue interval (the last --poll-wait wins)
	}
	return args
}

// baselineOverlay builds the requeue-polling baseline: the manager with controllers/toolcalls/waiter/waiter.go replaced
// by testdata/requeuepoll/waiter.go (go build -overlay), so that the product carries no second waiter.
const baselineOverlay = "-overlay=test/bench/testdata/requeuepoll/overlay.json"

// managerBinary is the manager of a mode: Toolgate's, or the requeue-polling baseline.
func managerBinary(b testing.TB, mode string) string {
	if mode == "requeue" {
		return th.Binary(b, "./cmd", baselineOverlay)
	}
	return th.ManagerBinary(b)
}

// newWorld is a namespace, a reference provider and a manager process in the given mode, with the
// design's default margins and a 30s long-poll wait; in mode async the manager serves its webhook
// receiver and the Tool names an ApprovalProvider whose provider delivers to it.
func newWorld(b *testing.B, mode string) (*th.Harness, *th.Process) {
	opts := []th.Option{th.WithoutManager(), th.WithPollWait(30 * time.Second)}
	args := modeArgs(mode)
	var providerCA []byte
	if *useTLS {
		ca := testcert.NewCAValidFor(b, "bench provider CA", certValidity)
		providerCA = ca.PEM
		caFile := filepath.Join(b.TempDir(), "ca.pem")
		NewWithT(b).Expect(os.WriteFile(caFile, ca.PEM, 0o600)).To(Succeed())
		opts = append(opts, th.WithProviderTLS(ca.ServerCert(b)), th.WithProvider(func(o *reference.Options) { o.HTTP2 = true }),
			th.WithProviderClient(func(o *provider.Options) { o.CAFile = caFile }))
		args = append(args, "--provider-ca-file", caFile)
	}
	var recv receiver
	if mode == "async" {
		recv = newReceiver(b)
		opts = append(opts, recv.opt)
		args = append(args, recv.args...)
	}
	h := th.New(b, env, opts...)
	h.Opts.Timing = controllers.DefaultTiming()
	var err error
	pprofAddr, err = th.FreeAddr() // the package's: liveBytes reads it
	NewWithT(b).Expect(err).NotTo(HaveOccurred())
	args = append(args, "--pprof-bind-address", pprofAddr)
	p := h.StartBinary(managerBinary(b, mode), args...)
	h.G.Eventually(func() error { _, err := scrape(p); return err }).WithTimeout(time.Minute).Should(Succeed())
	var tool []func(*tg.Tool)
	if mode == "async" {
		tool = append(tool, startDelivery(b, h, recv, providerCA))
	}
	h.Tool("issue-refund", "issue_refund", th.RefundSchema, tool...)
	return h, p
}

// pending measures N pending ToolCalls in a mode and returns the table's row; unless it is the last
// run, it then clears what it created, so that the next run's apiserver and etcd hold only their own.
func pending(b *testing.B, mode string, n int, last bool) string {
	cp0 := readControlPlane(b)
	h, p := newWorld(b, mode)
	g := h.G
	idleRSS, err := p.RSS()
	g.Expect(err).NotTo(HaveOccurred())
	idleLive := liveBytes(b, p, "")

	jobsSeen := watchJobs(b, h)
	// When the watch shows each call's notification recorded (asynchronous mode), to split a decision's
	// time into the provider's delivery and the manager's part.
	notified := newSeen()
	states := watchPhases(b, h, func(tc *tg.ToolCall) {
		if tc.Status.Notification != nil {
			notified.first(string(tc.UID), time.Now())
		}
	})
	// The calls must not reach their waiting limit before the decisions: creating 100,000 takes a while.
	limit := max(30*time.Minute, time.Duration(n)*50*time.Millisecond)
	created := time.Now()
	names := createToolCalls(b, h, n, limit)
	b.Logf("%d ToolCalls created in %s", n, time.Since(created).Round(time.Second))
	g.Eventually(func() int64 { return h.Provider.Stats().Creates }).WithTimeout(limit).WithPolling(time.Second).
		Should(BeNumerically("==", n), "requests submitted")
	g.Eventually(func() int { return states.count(tg.PhaseAwaitingApproval) }).WithTimeout(10*time.Minute).WithPolling(time.Second).
		Should(Equal(n), "ToolCalls AwaitingApproval")
	b.Logf("%d ToolCalls AwaitingApproval %s after the first create", n, time.Since(created).Round(time.Second))

	// Steady state: nothing changes; count what waiting costs.
	before, err := scrape(p)
	g.Expect(err).NotTo(HaveOccurred())
	s0 := h.Provider.Stats()
	<-time.After(*window)
	s1 := h.Provider.Stats()
	after, err := scrape(p)
	g.Expect(err).NotTo(HaveOccurred())
	rss, err := p.RSS()
	g.Expect(err).NotTo(HaveOccurred())
	profile := ""
	if *pprofDir != "" {
		profile = filepath.Join(*pprofDir, fmt.Sprintf("heap-%s-%d.pb.gz", mode, n))
	}
	livePer := (liveBytes(b, p, profile) - idleLive) / float64(n)
	reqs := float64((s1.Gets-s0.Gets)+(s1.Submits-s0.Submits)+(s1.Cancels-s0.Cancels)) / float64(n) / window.Minutes()
	conns := float64(s1.Connections-s0.Connections) / window.Minutes()
	steadyWrites := after.writes("") - before.writes("")
	rssPer := float64(rss-idleRSS) / float64(n)
	cp := readControlPlane(b)

	// Decisions at random times, 20 a second on average; latency from the approval to the Job being seen.
	m0, err := scrape(p)
	g.Expect(err).NotTo(HaveOccurred())
	a0, e0, self0 := scrapeAPIServer(b), scrapeEtcd(b), scrapeSelf(b)
	d := min(*decisions, n)
	approved := newSeen()
	var wg sync.WaitGroup
	spread := time.Duration(d) * time.Second / 20
	var cpu, apiserverCPU chan []byte
	if *pprofDir != "" {
		cpu, apiserverCPU = make(chan []byte, 1), make(chan []byte, 1)
		go func() { cpu <- cpuProfile(b, spread+time.Second) }()
		go func() { apiserverCPU <- apiserverCPUProfile(context.Background(), b, spread+time.Second) }()
	}
	start := time.Now()
	for _, i := range rand.Perm(n)[:d] {
		tc := h.Get(names[i])
		at := time.Duration(rand.Int64N(int64(spread)))
		wg.Add(1)
		time.AfterFunc(at, func() {
			defer wg.Done()
			exp := time.Now().Add(10 * time.Minute)
			approved.first(string(tc.UID), time.Now())
			_, err := h.Provider.Decide(tc.Status.RequestID, provider.StatusApproved, "ok", &exp)
			if err != nil {
				b.Errorf("deciding %s: %v", tc.Name, err)
			}
		})
	}
	wg.Wait()
	lat := approved.waitUntil(g, jobsSeen, d)
	m1, err := scrape(p)
	if err == nil {
		for _, name := range []string{"workqueue_queue_duration_seconds", "controller_runtime_reconcile_time_seconds"} {
			b.Logf("%s during the decisions:%s", name, histogramDelta(m0, m1, name))
		}
	}
	a1 := scrapeAPIServer(b)
	if a0 != nil && a1 != nil {
		for _, name := range []string{"apiserver_request_duration_seconds", "etcd_request_duration_seconds"} {
			b.Logf("%s during the decisions (the decision path's resources):%s", name, histogramDelta(onDecisionPath(a0), onDecisionPath(a1), name))
		}
	}
	b.Logf("during the decisions (%s): the manager %s and %.0f failed reconciles, the apiserver %s, etcd %s, this benchmark (the provider and the watches) %s",
		time.Since(start).Round(time.Second), m0.runtimeUse(m1),
		m1.counter("controller_runtime_reconcile_errors_total")-m0.counter("controller_runtime_reconcile_errors_total"),
		a0.runtimeUse(a1), e0.runtimeUse(scrapeEtcd(b)), self0.runtimeUse(scrapeSelf(b)))
	over := len(lat) - sort.Search(len(lat), func(i int) bool { return lat[i] > 50*time.Millisecond })
	b.Logf("decision → Job p90/p95 %s / %s; %d of %d over 50 ms", ms(pct(lat, 90)), ms(pct(lat, 95)), over, len(lat))
	b.Logf("slowest decisions (latency (to the notification on a watch) @ when decided): %s", approved.slowest(jobsSeen, notified, start, 10))
	if mode == "async" {
		st := h.Provider.Stats()
		b.Logf("notifications: %d delivered, %d failed attempts", st.Delivered, st.DeliveryFailures)
		toNote, fromNote := approved.until(notified), notified.until(jobsSeen)
		b.Logf("decision → notification on a watch p50/p99 %s / %s; notification on a watch → Job p50/p99 %s / %s",
			ms(pct(toNote, 50)), ms(pct(toNote, 99)), ms(pct(fromNote, 50)), ms(pct(fromNote, 99)))
	}
	if cpu != nil {
		if data := <-cpu; data != nil {
			g.Expect(os.WriteFile(filepath.Join(*pprofDir, fmt.Sprintf("cpu-%s-%d.pb.gz", mode, n)), data, 0o644)).To(Succeed())
		}
		if data := <-apiserverCPU; data != nil {
			g.Expect(os.WriteFile(filepath.Join(*pprofDir, fmt.Sprintf("cpu-apiserver-%s-%d.pb.gz", mode, n)), data, 0o644)).To(Succeed())
		}
		// With the heap profile of the steady window as its base (pprof -base), what the manager
		// allocated during the decisions.
		heapProfile(b, filepath.Join(*pprofDir, fmt.Sprintf("heap-after-decisions-%s-%d.pb.gz", mode, n)))
	}

	row := fmt.Sprintf("| %s | %d | %s | %s | %.2f | %.0f | %.0f | %.1f | %.1f | %s |",
		mode, n, ms(pct(lat, 50)), ms(pct(lat, 99)), reqs, conns, steadyWrites, rssPer/1024, livePer/1024, cp.cells(cp0))
	b.Logf("%s\n%s", header, row)
	p.Kill()
	if !last {
		clearNamespace(b, h, names)
	}
	return row
}

const header = "| Design | Pending | Decision→Job p50 | p99 | Provider requests / pending / min | provider connections opened / min | apiserver writes in the steady window | RSS KiB / pending | live heap + stacks KiB / pending | apiserver RSS MiB (+ in this run) | etcd RSS MiB (+ in this run) |\n|---|---|---|---|---|---|---|---|---|---|---|"

// BenchmarkThroughput: ToolCalls from creation to Succeeded as fast as the system allows, approved
// as soon as they are pending, Jobs finished as soon as they exist.
func BenchmarkThroughput(b *testing.B) {
	ceiling = apiserverCeiling(b, "configmaps")
	crdCeiling = apiserverCeiling(b, "toolcalls")
	b.Logf("apiserver write ceiling: %.0f writes/s (ConfigMaps), %.0f writes/s (ToolCalls)", ceiling, crdCeiling)
	for _, mode := range strings.Split(*modesFlag, ",") {
		if mode == "async" {
			continue // the pending runs measure it; the throughput run compares the synchronous designs
		}
		b.Run("mode="+mode, func(b *testing.B) {
			for range b.N {
				thrRows = append(thrRows, throughput(b, mode, *throughputN))
			}
		})
	}
}

func throughput(b *testing.B, mode string, n int) string {
	h, p := newWorld(b, mode)
	g := h.G
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubelet(ctx, b, h)
	jobsSeen := watchJobs(b, h)
	approved := newSeen()
	states := watchPhases(b, h, approver(h, approved))
	before, err := scrape(p)
	g.Expect(err).NotTo(HaveOccurred())

	if *pprofDir != "" {
		go func() { // the manager's CPU profile while it carries the load
			if data := cpuProfile(b, 20*time.Second); data != nil {
				_ = os.WriteFile(filepath.Join(*pprofDir, "cpu-"+mode+".pb.gz"), data, 0o644)
			}
		}()
		go func() { // and the apiserver's
			if data := apiserverCPUProfile(ctx, b, 20*time.Second); data != nil {
				_ = os.WriteFile(filepath.Join(*pprofDir, "cpu-apiserver-"+mode+".pb.gz"), data, 0o644)
			}
		}()
	}
	start := time.Now()
	createToolCalls(b, h, n, 10*time.Minute)
	g.Eventually(func() int { return states.count(tg.PhaseSucceeded) }).WithTimeout(20*time.Minute).WithPolling(100*time.Millisecond).
		Should(Equal(n), "ToolCalls Succeeded")
	elapsed := time.Since(start)
	rate := float64(n) / elapsed.Seconds()
	// What a decision waits for while the system is saturated: from the approval to the Job.
	lat := approved.waitUntil(g, jobsSeen, n)
	b.Logf("slowest decisions: %v", lat[max(0, len(lat)-5):])

	// Let the last writes (finalizer removal, events) land, then count.
	var after metricsSnapshot
	g.Eventually(func() float64 {
		a, err := scrape(p)
		if err != nil {
			return -1
		}
		prev := after.writes("")
		after = a
		return after.writes("") - prev
	}).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeZero())
	per := func(res string) float64 { return (after.writes(res) - before.writes(res)) / float64(n) }
	// The receipt's chain head is a Lease (the bench's manager runs without leader election).
	state := per("toolcalls") + per("toolcalls/status") + per("jobs") + per("leases")
	// Every write the apiserver takes for one ToolCall: its creation, the manager's state writes and
	// Events, and the simulated cluster's Pod, Pod status and Job status.
	all := 1 + state + per("events") + kubeletWrites
	row := fmt.Sprintf("| %s | %d | %.1f s | %.1f | %s / %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.2f | %.0f (ToolCalls: %.0f) | %.1f | %.1f |",
		mode, n, elapsed.Seconds(), rate, ms(pct(lat, 50)), ms(pct(lat, 99)), per("toolcalls"), per("toolcalls/status"), per("jobs"), per("leases"), state, per("events"), all,
		ceiling, crdCeiling, 0.7*ceiling/state, 0.7*ceiling/all)
	b.Logf("%s\n%s", thrHeader, row)
	p.Kill()
	return row
}

const thrHeader = "| Design | ToolCalls | Wall time | ToolCalls / s | Decision→Job p50 / p99 | ToolCall writes | status writes | Job creates | receipt chain writes | state writes / ToolCall | events / ToolCall | all writes / ToolCall | apiserver ceiling (writes/s) | 70% of ceiling / state writes | 70% of ceiling / all writes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"

// kubeletWrites is what the simulated cluster writes for each Job: the Pod, its status, the Job's status.
const kubeletWrites = 3

// apiserverCeiling measures the apiserver's own write rate on this machine: 32 clients creating
// objects and patching each once, for 10s. With ConfigMaps (protobuf, no schema) it is the ceiling
// the targets use; with ToolCalls in a namespace no manager watches (JSON, the CRD's schema and CEL
// rules, a status patch) it is what the same apiserver manages for the objects this workload writes.
func apiserverCeiling(b *testing.B, kind string) float64 {
	g := NewWithT(b)
	ns := "ceiling-" + kind
	g.Expect(client.IgnoreAlreadyExists(env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var writes atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("w%d-%d", w, i)
				var obj client.Object
				var patch client.Patch
				switch kind {
				case "toolcalls":
					obj = &tg.ToolCall{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: tg.ToolCallSpec{
						Tool: "issue_refund", Arguments: kruntime.RawExtension{Raw: []byte(`{"payment_id":"p","amount":1,"currency":"GBP"}`)},
						WaitingLimit: metav1.Duration{Duration: time.Hour}}}
					patch = client.RawPatch(types.MergePatchType, []byte(`{"status":{"phase":"Pending","message":"written by the ceiling run"}}`))
				default:
					obj = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"a": "1"}}
					patch = client.RawPatch(types.MergePatchType, []byte(`{"data":{"b":"2"}}`))
				}
				if env.Client.Create(ctx, obj) != nil {
					continue
				}
				writes.Add(1)
				var err error
				if kind == "toolcalls" {
					err = env.Client.Status().Patch(ctx, obj, patch)
				} else {
					err = env.Client.Patch(ctx, obj, patch)
				}
				if err == nil {
					writes.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(writes.Load()) / time.Since(start).Seconds()
}

// BenchmarkPending: N ToolCalls wait for a human; decisions arrive at random times. It is declared
// after BenchmarkThroughput so that it runs after it: its last run (100,000 pending by default) is
// left in place, and the throughput run and the apiserver's ceiling are measured without it.
func BenchmarkPending(b *testing.B) {
	cases := pendingCases()
	for i, c := range cases {
		b.Run(caseName(c.mode, c.n), func(b *testing.B) {
			for range b.N {
				results = append(results, pending(b, c.mode, c.n, i == len(cases)-1))
			}
		})
	}
}

// createToolCalls creates n ToolCalls with 32 concurrent clients and returns their names.
func createToolCalls(b *testing.B, h *th.Harness, n int, limit time.Duration) []string {
	names := make([]string, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workqueue.ParallelizeUntil(ctx, 32, n, func(i int) {
		names[i] = fmt.Sprintf("call-%05d", i)
		tc := h.NewToolCall(names[i], "issue_refund", fmt.Sprintf(`{"payment_id":"p-%d","amount":%d,"currency":"GBP"}`, i, i+1), limit, nil)
		if err := h.K8s.Create(ctx, tc); err != nil {
			b.Errorf("creating %s: %v", names[i], err)
			cancel()
		}
	})
	return names
}

// phases follows the phase of every ToolCall in a namespace on a watch, so that waiting for a count
// costs the apiserver nothing: listing every ToolCall a few times a second would take CPU from the
// apiserver being measured.
type phases struct {
	mu sync.Mutex
	of map[string]tg.ToolCallPhase
}

// watchPhases starts following; onChange, when set, is told about every ToolCall the watch delivers.
func watchPhases(b *testing.B, h *th.Harness, onChange func(*tg.ToolCall)) *phases {
	p := &phases{of: map[string]tg.ToolCallPhase{}}
	h.G.Expect(follow(b, &tg.ToolCallList{}, h.NS, func(ev watch.Event) {
		tc, ok := ev.Object.(*tg.ToolCall)
		if !ok {
			return
		}
		p.mu.Lock()
		if ev.Type == watch.Deleted {
			delete(p.of, tc.Name)
		} else {
			p.of[tc.Name] = tc.Status.Phase
		}
		p.mu.Unlock()
		if onChange != nil && ev.Type != watch.Deleted {
			onChange(tc)
		}
	})).To(Succeed())
	return p
}

func (p *phases) count(phase tg.ToolCallPhase) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, ph := range p.of {
		if ph == phase {
			n++
		}
	}
	return n
}

// seen records when something first happened to each ToolCall (by its UID): its approval, or the
// test seeing its Job.
type seen struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newSeen() *seen { return &seen{at: map[string]time.Time{}} }

// first records t for uid unless a time is recorded already, and says whether it did.
func (s *seen) first(uid string, t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.at[uid]; dup {
		return false
	}
	s.at[uid] = t
	return true
}

// both calls f with each ToolCall's time in s and in later, for those in both.
func (s *seen) both(later *seen, f func(uid string, t0, t1 time.Time)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for uid, t0 := range s.at {
		if t1, ok := later.get(uid); ok {
			f(uid, t0, t1)
		}
	}
}

// until returns, sorted, the time from each ToolCall's time in s to its time in later, for those in both.
func (s *seen) until(later *seen) []time.Duration {
	var d []time.Duration
	s.both(later, func(_ string, t0, t1 time.Time) { d = append(d, t1.Sub(t0)) })
	slices.Sort(d)
	return d
}

// waitUntil waits until n ToolCalls of s are in later too, and returns until(later).
func (s *seen) waitUntil(g Gomega, later *seen, n int) []time.Duration {
	var d []time.Duration
	g.Eventually(func() int {
		d = s.until(later)
		return len(d)
	}).WithTimeout(2*time.Minute).WithPolling(200*time.Millisecond).Should(Equal(n), "Jobs created for the approvals")
	return d
}

// slowest lists the n longest times from s to later, each with when it started after start and,
// when mid holds a time for it too, the time from s to mid.
func (s *seen) slowest(later, mid *seen, start time.Time, n int) string {
	type pair struct {
		d, at, mid time.Duration
	}
	var all []pair
	s.both(later, func(uid string, t0, t1 time.Time) {
		p := pair{d: t1.Sub(t0), at: t0.Sub(start), mid: -1}
		if tm, ok := mid.get(uid); ok {
			p.mid = tm.Sub(t0)
		}
		all = append(all, p)
	})
	slices.SortFunc(all, func(a, b pair) int { return int(b.d - a.d) })
	var out []string
	for _, p := range all[:min(n, len(all))] {
		m := ""
		if p.mid >= 0 {
			m = fmt.Sprintf(" (%s)", p.mid.Round(time.Millisecond))
		}
		out = append(out, fmt.Sprintf("%s%s @ %s", p.d.Round(time.Millisecond), m, p.at.Round(100*time.Millisecond)))
	}
	return strings.Join(out, ", ")
}

func (s *seen) get(uid string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[uid]
	return t, ok
}

func watchJobs(b *testing.B, h *th.Harness) *seen {
	s := newSeen()
	h.G.Expect(follow(b, &batchv1.JobList{}, h.NS, func(ev watch.Event) {
		if job, ok := ev.Object.(*batchv1.Job); ok && ev.Type == watch.Added {
			s.first(job.Labels[tg.LabelToolCallUID], time.Now())
		}
	})).To(Succeed())
	return s
}

// follow hands every event of list's objects in namespace ns to each until the benchmark ends: an
// Added event for every object there is, then the changes. It runs a client-go informer, whose
// watch resumes from the last resource version it saw when the apiserver ends it (as it does a
// watcher that falls behind), and which lists again, when it must, with a watch-list request the
// apiserver serves from its watch cache: a LIST of every ToolCall (100,000 at the largest size)
// would be read from etcd, and would load the apiserver and etcd for most of the decisions
// measured. The store keeps each object's metadata and status only. each must accept an object it
// has seen before.
func follow(b *testing.B, list client.ObjectList, ns string, each func(watch.Event)) error {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: controllers.Scheme()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (kruntime.Object, error) {
			l := list.DeepCopyObject().(client.ObjectList)
			return l, wc.List(ctx, l, client.InNamespace(ns), &client.ListOptions{Raw: &o})
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return wc.Watch(ctx, list.DeepCopyObject().(client.ObjectList), client.InNamespace(ns), &client.ListOptions{Raw: &o})
		},
	}
	var item kruntime.Object
	switch list.(type) {
	case *tg.ToolCallList:
		item = &tg.ToolCall{}
	case *batchv1.JobList:
		item = &batchv1.Job{}
	default:
		return fmt.Errorf("follow: no item type for %T", list)
	}
	inf := toolscache.NewSharedIndexInformer(lw, item, 0, toolscache.Indexers{})
	if err := inf.SetTransform(func(o any) (any, error) {
		switch o := o.(type) {
		case *tg.ToolCall:
			return &tg.ToolCall{ObjectMeta: slim(o.ObjectMeta), Status: o.Status}, nil
		case *batchv1.Job:
			return &batchv1.Job{ObjectMeta: slim(o.ObjectMeta), Status: o.Status}, nil
		}
		return o, nil
	}); err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { each(watch.Event{Type: watch.Added, Object: o.(kruntime.Object)}) },
		UpdateFunc: func(_, o any) { each(watch.Event{Type: watch.Modified, Object: o.(kruntime.Object)}) },
		DeleteFunc: func(o any) {
			if gone, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
				o = gone.Obj
			}
			if o, ok := o.(kruntime.Object); ok {
				each(watch.Event{Type: watch.Deleted, Object: o})
			}
		},
	}); err != nil {
		return err
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("follow: the informer of %T did not sync", list)
	}
	return nil
}

// slim is the metadata follow's callers read.
func slim(m metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels}
}

// approver approves each request as soon as its ToolCall is AwaitingApproval, as a person watching
// the approval page would, without reading the provider's store over and over to find new requests,
// and records when it did in approved.
func approver(h *th.Harness, approved *seen) func(*tg.ToolCall) {
	return func(tc *tg.ToolCall) {
		id := tc.Status.RequestID
		if tc.Status.Phase != tg.PhaseAwaitingApproval || id == "" {
			return
		}
		if approved.first(string(tc.UID), time.Now()) {
			go func() {
				exp := time.Now().Add(10 * time.Minute)
				_, _ = h.Provider.Decide(id, provider.StatusApproved, "ok", &exp)
			}()
		}
	}
}

var finishBackoff = wait.Backoff{Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 2 * time.Second}

// kubelet finishes every Job as soon as it is created. A Job seen again after its watch was opened
// again is finished again, which is harmless.
func kubelet(ctx context.Context, b *testing.B, h *th.Harness) {
	err := follow(b, &batchv1.JobList{}, h.NS, func(ev watch.Event) {
		if job, ok := ev.Object.(*batchv1.Job); ok && ev.Type == watch.Added && !jobFinished(job) {
			// An apiserver under load may refuse a write (429 from priority and fairness): try
			// again, as a kubelet would, until the Job is finished.
			go func() {
				_ = wait.ExponentialBackoffWithContext(ctx, finishBackoff, func(ctx context.Context) (bool, error) {
					return th.FinishJob(ctx, h.K8s, h.NS, job.Name, true, "refunded") == nil, nil
				})
			}()
		}
	})
	if err != nil {
		b.Error(err)
	}
}

func jobFinished(job *batchv1.Job) bool { return job.Status.Succeeded+job.Status.Failed > 0 }

// metricsSnapshot is one scrape of the manager's /metrics.
type metricsSnapshot map[string]*dto.MetricFamily

func scrape(p *th.Process) (metricsSnapshot, error) {
	resp, err := http.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	return parser.TextToMetricFamilies(resp.Body)
}

// writes sums toolgate_apiserver_writes_total for a resource ("" for all).
func (m metricsSnapshot) writes(resource string) float64 {
	f, ok := m["toolgate_apiserver_writes_total"]
	if !ok {
		return 0
	}
	total := 0.0
	for _, s := range f.GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "resource" && (resource == "" || l.GetValue() == resource) {
				total += s.GetCounter().GetValue()
			}
		}
	}
	return total
}

// runtimeUse says how many garbage collections a Go process ran and how much CPU it used between
// two scrapes of its metrics (m and later).
func (m metricsSnapshot) runtimeUse(later metricsSnapshot) string {
	gc0, gc1 := m.first("go_gc_duration_seconds"), later.first("go_gc_duration_seconds")
	cpu0, cpu1 := m.first("process_cpu_seconds_total"), later.first("process_cpu_seconds_total")
	if gc0 == nil || gc1 == nil || cpu0 == nil || cpu1 == nil {
		return "(not measured)"
	}
	return fmt.Sprintf("%d garbage collections and %.1f s of CPU", gc1.GetSummary().GetSampleCount()-gc0.GetSummary().GetSampleCount(),
		cpu1.GetCounter().GetValue()-cpu0.GetCounter().GetValue())
}

// counter sums the series of a counter.
func (m metricsSnapshot) counter(name string) float64 {
	total := 0.0
	if f, ok := m[name]; ok {
		for _, s := range f.GetMetric() {
			total += s.GetCounter().GetValue()
		}
	}
	return total
}

// first is the first series of a metric, or nil.
func (m metricsSnapshot) first(name string) *dto.Metric {
	if f, ok := m[name]; ok && len(f.GetMetric()) > 0 {
		return f.GetMetric()[0]
	}
	return nil
}

func (m metricsSnapshot) gauge(name string) float64 { return m.first(name).GetGauge().GetValue() }

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := (len(d)*p+99)/100 - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on a %d-CPU machine, with `go test ./test/bench/ -run '^$' -bench . -benchtime 1x -args -bench.modes=%s -bench.sizes=%s -bench.window=%s -bench.decisions=%d -bench.throughput=%d -bench.workers=%d`.\n\n",
		time.Now().UTC().Format("2006-01-02"), numCPU(), *modesFlag, *sizesFlag, *window, *decisions, *throughputN, *workers)
	if len(results) > 0 {
		fmt.Fprintf(&b, "### Pending ToolCalls\n\n%s\n", header)
		for _, r := range results {
			fmt.Fprintln(&b, r)
		}
		b.WriteString("\n")
	}
	if len(thrRows) > 0 {
		fmt.Fprintf(&b, "### End-to-end throughput\n\n%s\n", thrHeader)
		for _, r := range thrRows {
			fmt.Fprintln(&b, r)
		}
	}
	return b.String()
}

const beginMark, endMark = "<!-- bench:begin -->", "<!-- bench:end -->"

// replaceSection writes table between the bench markers of path.
func replaceSection(path, table string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	i, j := strings.Index(s, beginMark), strings.Index(s, endMark)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no %s ... %s section", path, beginMark, endMark)
	}
	s = s[:i+len(beginMark)] + "\n" + table + "\n" + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

func numCPU() int { return runtime.NumCPU() }

var pprofAddr string

// liveBytes forces a garbage collection in the manager (through pprof), optionally saving the heap
// profile, then reads its live heap and goroutine stacks.
func liveBytes(b *testing.B, p *th.Process, profile string) float64 {
	heapProfile(b, profile)
	m, err := scrape(p)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("manager after GC: heap in use %.1f MiB (objects %.1f MiB), stacks %.1f MiB, goroutines %.0f",
		m.gauge("go_memstats_heap_inuse_bytes")/(1<<20), m.gauge("go_memstats_heap_alloc_bytes")/(1<<20),
		m.gauge("go_memstats_stack_inuse_bytes")/(1<<20), m.gauge("go_goroutines"))
	return m.gauge("go_memstats_heap_inuse_bytes") + m.gauge("go_memstats_stack_inuse_bytes")
}

// heapProfile forces a garbage collection in the manager and saves its heap profile to path, unless
// path is empty (the collection happens all the same).
func heapProfile(b *testing.B, path string) {
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1")
	if err != nil {
		b.Fatal(err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	if path != "" {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// scrapeAPIServer reads the apiserver's metrics, or nil.
func scrapeAPIServer(b *testing.B) metricsSnapshot {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		b.Logf("apiserver metrics: %v", err)
		return nil
	}
	data, err := dc.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Logf("apiserver metrics: %v", err)
		return nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	m, err := parser.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		b.Logf("apiserver metrics: %v", err)
		return nil
	}
	return m
}

// scrapeEtcd reads etcd's metrics (served on its client URL), or nil.
func scrapeEtcd(b *testing.B) metricsSnapshot {
	resp, err := http.Get(env.Env.ControlPlane.Etcd.URL.String() + "/metrics")
	if err != nil {
		b.Logf("etcd metrics: %v", err)
		return nil
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	m, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Logf("etcd metrics: %v", err)
		return nil
	}
	return m
}

// scrapeSelf reads this process's own metrics (its provider, its informers and the decisions it
// makes share the machine with the manager), or nil.
func scrapeSelf(b *testing.B) metricsSnapshot {
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Logf("the benchmark's metrics: %v", err)
		return nil
	}
	m := metricsSnapshot{}
	for _, f := range fams {
		m[f.GetName()] = f
	}
	return m
}

// onDecisionPath keeps, of the apiserver's request and etcd histograms, the series of the resources
// a decision goes through (ToolCalls, Tools, Secrets, Jobs) and drops the rest.
func onDecisionPath(m metricsSnapshot) metricsSnapshot {
	keep := func(l *dto.LabelPair) bool {
		switch l.GetName() {
		case "resource", "type":
			v := l.GetValue()
			return strings.Contains(v, "toolcalls") || strings.Contains(v, "tools") || strings.Contains(v, "secrets") || strings.Contains(v, "jobs")
		}
		return false
	}
	out := metricsSnapshot{}
	for name, f := range m {
		g := &dto.MetricFamily{Name: f.Name, Type: f.Type}
		for _, s := range f.GetMetric() {
			if slices.ContainsFunc(s.GetLabel(), keep) {
				g.Metric = append(g.Metric, s)
			}
		}
		out[name] = g
	}
	return out
}

// cpuProfile takes the manager's CPU profile over d.
func cpuProfile(b *testing.B, d time.Duration) []byte {
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", pprofAddr, int(d.Seconds())))
	if err != nil {
		b.Logf("CPU profile: %v", err)
		return nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Logf("CPU profile: %v (HTTP %d)", err, resp.StatusCode)
		return nil
	}
	return data
}

// apiserverCPUProfile takes the apiserver's CPU profile over d.
func apiserverCPUProfile(ctx context.Context, b *testing.B, d time.Duration) []byte {
	cfg := rest.CopyConfig(env.Config)
	cfg.Timeout = d + time.Minute
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		b.Logf("apiserver profile: %v", err)
		return nil
	}
	data, err := dc.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", strconv.Itoa(int(d.Seconds()))).DoRaw(ctx)
	if err != nil {
		b.Logf("apiserver profile: %v", err)
		return nil
	}
	return data
}

// histogramDelta prints, per label set, how many observations of a histogram fell into each bucket
// between two scrapes.
func histogramDelta(m0, m1 metricsSnapshot, name string) string {
	var out strings.Builder
	f1, ok := m1[name]
	if !ok {
		return " (absent)"
	}
	prev := map[string]*dto.Histogram{}
	if f0, ok := m0[name]; ok {
		for _, m := range f0.GetMetric() {
			prev[labelsOf(m)] = m.GetHistogram()
		}
	}
	for _, m := range f1.GetMetric() {
		h := m.GetHistogram()
		h0 := prev[labelsOf(m)]
		n := h.GetSampleCount()
		if h0 != nil {
			n -= h0.GetSampleCount()
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(&out, "\n  %s n=%d:", labelsOf(m), n)
		last := uint64(0)
		for i, bk := range h.GetBucket() {
			c := bk.GetCumulativeCount()
			if h0 != nil {
				c -= h0.GetBucket()[i].GetCumulativeCount()
			}
			if c != last {
				fmt.Fprintf(&out, " <=%gs:%d", bk.GetUpperBound(), c-last)
				last = c
			}
		}
	}
	return out.String()
}

func labelsOf(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(parts, ",")
}

// The baseline is built from the product's source with one file replaced: a change to what the
// reconciler asks of its waiter must be made to the baseline too, or this fails in `make test`.
func TestBaselineBuildsWithItsOwnWaiter(t *testing.T) {
	g := NewWithT(t)
	f, err := elf.Open(managerBinary(t, "requeue"))
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = f.Close() }()
	syms, err := f.Symbols()
	g.Expect(err).NotTo(HaveOccurred())
	names := make([]string, 0, len(syms))
	for _, s := range syms {
		names = append(names, s.Name)
	}
	g.Expect(names).To(ContainElement("toolgate.dev/toolgate/controllers/toolcalls/waiter.(*Waiter).Latest"))
	g.Expect(names).NotTo(ContainElement(HavePrefix("toolgate.dev/toolgate/controllers/toolcalls/waiter.(*poller)")), "the long-poll waiter was replaced")
}
