package chaos

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	th "toolgate.dev/toolgate/test/testharness"
)

// starts measures how long each manager process takes to be ready: from its start until it has
// reconciled ToolCalls and its work queue is empty, i.e. it has caught up with every open call once.
// That is what a decision made during a kill waits for, and it grows with the load (hundreds of open
// calls, two profiles on two cores), so the liveness bound takes it from the run rather than assuming
// it. A process killed before it was ready is counted apart: it is one of the lost lives the bound
// allows for.
type starts struct {
	mu      sync.Mutex
	longest time.Duration
	ready   int // processes that became ready
	killed  int // processes killed before they were ready
	client  *http.Client
}

func newStarts() *starts {
	return &starts{client: &http.Client{Timeout: time.Second}}
}

// watch follows a process started at started until it is ready or has exited. It returns at once and
// polls its metrics every 100ms on a goroutine of its own.
func (s *starts) watch(p *th.Process, started time.Time) {
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for range tick.C {
			if p.Exited() {
				s.record(time.Since(started), false)
				return
			}
			if s.isReady(p) {
				s.record(time.Since(started), true)
				return
			}
		}
	}()
}

func (s *starts) record(d time.Duration, ready bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ready {
		s.longest = max(s.longest, d)
		s.ready++
	} else {
		s.killed++
	}
}

// longestStart is the longest start measured so far.
func (s *starts) longestStart() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.longest
}

func (s *starts) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("longest %s (%d ready, %d killed before they were)", s.longest.Round(10*time.Millisecond), s.ready, s.killed)
}

// isReady reports whether the manager has reconciled ToolCalls and has none queued.
func (s *starts) isReady(p *th.Process) bool {
	resp, err := s.client.Get("http://" + p.MetricsAddr + "/metrics")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return false
	}
	reconciled := sum(families["controller_runtime_reconcile_total"], func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
	queued := sum(families["workqueue_depth"], func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
	return reconciled > 0 && queued == 0
}

// sum adds up the ToolCall controller's series of a metric family.
func sum(f *dto.MetricFamily, value func(*dto.Metric) float64) float64 {
	total := 0.0
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "controller" && l.GetValue() == "toolcall" {
				total += value(m)
			}
		}
	}
	return total
}
