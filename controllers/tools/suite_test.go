package tools_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every scenario of the Tool controller shares; each scenario has its own
// namespace, reference provider and manager (test/testharness). The scenarios: how a Tool reads for
// kstatus and Argo CD (kstatus_test.go), and schema references outside the schema
// (schema_refs_test.go). Fuzz targets and -list need no cluster: th.Main starts none for them, and
// env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
