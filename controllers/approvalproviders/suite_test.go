package approvalproviders_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every scenario of the ApprovalProvider controller shares; each scenario
// has its own namespace, reference provider and manager (test/testharness). The scenarios: which
// provider object serves a call, provisioning, and for how long a deleted one still serves
// (serving_test.go), the renewal of expiring credentials (renewal_test.go), and how provider objects
// read for kstatus and Argo CD (kstatus_test.go). Fuzz targets and -list need no cluster: th.Main
// starts none for them, and env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
