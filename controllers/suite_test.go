package controllers_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane the suites of this package share. They test the wiring of the manager,
// which no one controller owns: the metrics endpoint and its certificate (metrics_tls_test.go), the
// day-2 metrics over the calls and provider objects of every controller (monitoring_test.go:
// provider requests by provider object, the gauges computed from the cache at each scrape), and the
// kept REST mappings (restmapper_test.go). Each
// controller's scenarios are beside it, in controllers/toolcalls, controllers/tools,
// controllers/approvalproviders and controllers/mcpservers. Fuzz targets and -list need no cluster:
// th.Main starts none for them, and env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
