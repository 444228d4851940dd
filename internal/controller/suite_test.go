package controller_test

import (
	"testing"

	th "toolgate.dev/toolgate/internal/testharness"
)

// env is the control plane every scenario of this package shares; each scenario has its own
// namespace, reference provider and manager (internal/testharness). Fuzz targets and -list need no
// cluster: th.Main starts none for them, and env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
