package controllers

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/providercache"
)

// The gauges of what the cluster holds, computed when metrics are gathered from the manager's cache
// (kube-state-metrics' way: no goroutine, no polling). Every replica's cache holds ToolCalls and
// provider objects (the indexes of indexes.go start their informers, leader or not), so every
// replica exports the same values, the standbys included: they still tell of calls piling up when
// the leader is stuck. Queries aggregate them with max, never sum.
var (
	toolCallsByPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_toolcalls",
		Help: "ToolCalls in the manager's cache, by namespace and phase (every phase of a namespace that has any ToolCall, 0 included).",
	}, []string{"namespace", "phase"})

	oldestWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_oldest_waiting_toolcall_seconds",
		Help: "Age (seconds since creation) of the oldest ToolCall awaiting a decision, by namespace and mode (sync: long-polled; async: its provider delivers notifications).",
	}, []string{"namespace", "mode"})

	withoutReceipt = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_ended_toolcalls_without_receipt",
		Help: "ToolCalls that ended (a terminal phase) and hold no signed receipt yet, by namespace (every namespace that has any ToolCall, 0 included).",
	}, []string{"namespace"})

	providerReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "toolgate_provider_ready",
		Help: "1 when the provider object's Ready condition is True, else 0, by provider (ApprovalProvider/<namespace>/<name>, ClusterApprovalProvider/<name>).",
	}, []string{"provider"})
)

// Modes of a waiting call, the values of toolgate_oldest_waiting_toolcall_seconds' mode label.
const (
	modeSync  = "sync"
	modeAsync = "async"
)

// stateGauges is the collector of the gauges above. It is registered once per process; each running
// manager adds its cache as a source while it runs (a test process runs several managers, each
// limited to its namespace; a series two of them see is exported once).
type stateGauges struct {
	mu      sync.Mutex
	sources map[*stateSource]struct{}
}

// stateSource is one manager's cache and clock.
type stateSource struct {
	cache client.Reader
	clock clock.PassiveClock
	log   logr.Logger
}

var states = &stateGauges{sources: map[*stateSource]struct{}{}}

func init() { metrics.Registry.MustRegister(states) }

// Describe implements prometheus.Collector.
func (s *stateGauges) Describe(ch chan<- *prometheus.Desc) {
	toolCallsByPhase.Describe(ch)
	withoutReceipt.Describe(ch)
	oldestWaiting.Describe(ch)
	providerReady.Describe(ch)
}

// collectTimeout bounds the reads of one Collect; the cache answers from memory once synced.
const collectTimeout = 5 * time.Second

// Collect implements prometheus.Collector: it sets the gauges from each source's cache, then sends
// them. A source whose cache cannot be read is left out (and logged).
func (s *stateGauges) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	toolCallsByPhase.Reset()
	withoutReceipt.Reset()
	oldestWaiting.Reset()
	providerReady.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), collectTimeout)
	defer cancel()
	for src := range s.sources {
		if err := src.collect(ctx); err != nil {
			src.log.Error(err, "reading the cache for the ToolCall and provider gauges")
		}
	}
	toolCallsByPhase.Collect(ch)
	withoutReceipt.Collect(ch)
	oldestWaiting.Collect(ch)
	providerReady.Collect(ch)
}

func (s *stateGauges) add(src *stateSource) {
	s.mu.Lock()
	s.sources[src] = struct{}{}
	s.mu.Unlock()
}

func (s *stateGauges) remove(src *stateSource) {
	s.mu.Lock()
	delete(s.sources, src)
	s.mu.Unlock()
}

// allPhases are the values of toolCallsByPhase's phase label.
var allPhases = []tg.ToolCallPhase{tg.PhasePending, tg.PhaseAwaitingApproval, tg.PhaseRunning, tg.PhaseSucceeded,
	tg.PhaseFailed, tg.PhaseDenied, tg.PhaseExpired, tg.PhaseApprovalUnavailable, tg.PhaseCancelled, tg.PhaseRejected}

// collect sets the gauges from src's cache. The lists are read without copying: nothing here writes
// to what the cache holds.
func (src *stateSource) collect(ctx context.Context) error {
	provs, err := src.providerObjects(ctx)
	if err != nil {
		return err
	}
	for k, obj := range provs {
		ready := 0.0
		if meta.IsStatusConditionTrue(obj.GetStatus().Conditions, tg.ConditionReady) {
			ready = 1
		}
		providerReady.WithLabelValues(k.Label()).Set(ready)
	}
	calls := &tg.ToolCallList{}
	if err := src.cache.List(ctx, calls, client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	counts := map[string]map[tg.ToolCallPhase]int{}
	unsigned := map[string]int{}
	type waitKey struct{ namespace, mode string }
	oldest := map[waitKey]time.Time{}
	for i := range calls.Items {
		tc := &calls.Items[i]
		if counts[tc.Namespace] == nil {
			counts[tc.Namespace] = map[tg.ToolCallPhase]int{}
		}
		counts[tc.Namespace][tc.Status.Phase.OrPending()]++
		if tc.Status.Phase.IsTerminal() && tc.Status.Receipt == nil {
			unsigned[tc.Namespace]++
		}
		if tc.Status.Phase != tg.PhaseAwaitingApproval || tc.Status.Decision != nil {
			continue
		}
		key := waitKey{tc.Namespace, waitMode(tc, provs)}
		if at, ok := oldest[key]; !ok || tc.CreationTimestamp.Time.Before(at) {
			oldest[key] = tc.CreationTimestamp.Time
		}
	}
	for ns, byPhase := range counts {
		for _, p := range allPhases {
			toolCallsByPhase.WithLabelValues(ns, string(p)).Set(float64(byPhase[p]))
		}
		withoutReceipt.WithLabelValues(ns).Set(float64(unsigned[ns]))
	}
	now := src.clock.Now()
	for key, created := range oldest {
		oldestWaiting.WithLabelValues(key.namespace, key.mode).Set(max(now.Sub(created), 0).Seconds())
	}
	return nil
}

// providerObjects are the ApprovalProviders and ClusterApprovalProviders in the cache, by key.
func (src *stateSource) providerObjects(ctx context.Context) (map[providercache.Key]tg.GenericProvider, error) {
	out := map[providercache.Key]tg.GenericProvider{}
	aps := &tg.ApprovalProviderList{}
	if err := src.cache.List(ctx, aps, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range aps.Items {
		ap := &aps.Items[i]
		out[providercache.Key{Kind: tg.KindApprovalProvider, Namespace: ap.Namespace, Name: ap.Name}] = ap
	}
	caps := &tg.ClusterApprovalProviderList{}
	if err := src.cache.List(ctx, caps, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	for i := range caps.Items {
		cap := &caps.Items[i]
		out[providercache.Key{Kind: tg.KindClusterApprovalProvider, Name: cap.Name}] = cap
	}
	return out, nil
}

// waitMode tells how a call awaiting a decision waits, by the rule the ToolCall controller follows
// (providercache.Registry.Asynchronous): asynchronously when its provider object delivers notifications
// for the instance its request lives in, else with a long poll.
func waitMode(tc *tg.ToolCall, provs map[providercache.Key]tg.GenericProvider) string {
	k, err := providercache.Accepted(tc)
	if err != nil || k == providercache.Flags {
		return modeSync
	}
	if obj, ok := provs[k]; ok && providercache.DeliversTo(obj, lifecycle.ReadRecord(tc).Instance) {
		return modeAsync
	}
	return modeSync
}

// stateMetrics is the Runnable that adds a manager's cache to the gauges' sources once it has
// synced, on every replica, and takes it away when the manager stops.
type stateMetrics struct {
	src  *stateSource
	sync func(context.Context) bool
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica exports the gauges.
func (m *stateMetrics) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable.
func (m *stateMetrics) Start(ctx context.Context) error {
	if !m.sync(ctx) {
		return nil // stopped before the cache synced
	}
	states.add(m.src)
	<-ctx.Done()
	states.remove(m.src)
	return nil
}
