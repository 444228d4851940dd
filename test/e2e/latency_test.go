//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// E2E_LATENCY_CALLS ToolCalls (default 50) are approved one after another as fast as the provider's
// admin API answers; the test measures, per call, from the approval to the tool's container seen
// started (running or terminated), to its Job seen, and to the ToolCall seen Succeeded, and logs p50/p95/max
// (docs/performance.md quotes them). Every call must succeed with one Pod.
func TestDecisionToContainerLatency(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	n := 50
	if v := os.Getenv("E2E_LATENCY_CALLS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		g.Expect(err).NotTo(HaveOccurred(), "E2E_LATENCY_CALLS")
	}
	ns := newNamespace(t)
	// From the decision on, as the figures of docs/performance.md were first measured: without the
	// sample's preview, whose 50 Pods before any decision would only load the node.
	tool := sampleTool(t, ns)
	tool.Spec.Preview, tool.Spec.Approval = nil, nil
	createTool(t, g, tool)

	calls := make([]*tg.ToolCall, n)
	for i := range calls {
		tc := sampleToolCall(t, ns)
		tc.Name = fmt.Sprintf("latency-%03d", i)
		g.Expect(k8s.Create(ctx, tc)).To(Succeed())
		calls[i] = tc
	}
	for _, tc := range calls {
		waitPhase(g, tc, tg.PhaseAwaitingApproval, stepTimeout)
	}

	decided := map[string]time.Time{}
	for _, tc := range calls {
		decide(g, tc, true, "10m")
		decided[string(tc.UID)] = time.Now()
	}

	created, started, succeeded := map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	g.Eventually(func(g Gomega) {
		now := time.Now()
		jobs := &batchv1.JobList{}
		g.Expect(k8s.List(ctx, jobs, client.InNamespace(ns), client.HasLabels{tg.LabelToolCallUID})).To(Succeed())
		for _, j := range jobs.Items {
			if _, seen := created[j.Labels[tg.LabelToolCallUID]]; !seen {
				created[j.Labels[tg.LabelToolCallUID]] = now
			}
		}
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(ns), client.HasLabels{tg.LabelToolCallUID})).To(Succeed())
		for _, p := range pods.Items {
			uid := p.Labels[tg.LabelToolCallUID]
			if _, seen := started[uid]; seen || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			if s := p.Status.ContainerStatuses[0].State; s.Running != nil || s.Terminated != nil {
				started[uid] = now
			}
		}
		list := &tg.ToolCallList{}
		g.Expect(k8s.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		for _, tc := range list.Items {
			if _, ok := decided[string(tc.UID)]; !ok {
				continue // a probe from createTool
			}
			if tc.Status.Phase == tg.PhaseSucceeded {
				if _, seen := succeeded[string(tc.UID)]; !seen {
					succeeded[string(tc.UID)] = now
				}
			} else if isTerminal(tc.Status.Phase) {
				StopTrying(fmt.Sprintf("ToolCall %s ended %s (%s)", tc.Name, tc.Status.Phase, tc.Status.Message)).Now()
			}
		}
		g.Expect(succeeded).To(HaveLen(n))
	}).WithTimeout(10 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())

	var toJob, toStart, toSucceed []time.Duration
	for _, tc := range calls {
		get(g, tc)
		expectReceipt(g, tc)
		uid := string(tc.UID)
		toJob = append(toJob, created[uid].Sub(decided[uid]))
		if s, ok := started[uid]; ok { // a container started and ended between two looks is not counted
			toStart = append(toStart, s.Sub(decided[uid]))
		}
		toSucceed = append(toSucceed, succeeded[uid].Sub(decided[uid]))
	}
	g.Expect(len(toStart)).To(BeNumerically(">=", n*9/10), "most containers were seen running or terminated before their ToolCall succeeded")
	t.Logf("%d calls approved in %s; decision -> Job seen: %s; decision -> container started (%d seen): %s; decision -> Succeeded: %s",
		n, decided[string(calls[n-1].UID)].Sub(decided[string(calls[0].UID)]).Round(time.Millisecond),
		percentiles(toJob), len(toStart), percentiles(toStart), percentiles(toSucceed))
}

func percentiles(ds []time.Duration) string {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[int(q*float64(len(ds)-1)+0.5)].Round(10 * time.Millisecond) }
	return fmt.Sprintf("p50 %s, p95 %s, max %s", at(0.5), at(0.95), ds[len(ds)-1].Round(10*time.Millisecond))
}
