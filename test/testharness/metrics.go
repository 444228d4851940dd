package testharness

import "sigs.k8s.io/controller-runtime/pkg/metrics"

// MetricValue reads a counter, gauge or histogram sample count from the controller-runtime registry,
// summed over the series whose labels include labels.
func MetricValue(name string, labels map[string]string) float64 {
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

// MetricSeries reads the one series of a counter or gauge whose labels are exactly labels from the
// controller-runtime registry, and whether it is exported at all (a gauge at 0 is, a gauge the
// manager leaves out is not).
func MetricSeries(name string, labels map[string]string) (float64, bool) {
	families, err := metrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; !ok || v != lp.GetValue() {
					continue next
				}
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}
