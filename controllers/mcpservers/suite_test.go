package mcpservers_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every scenario of the MCPServer controller shares; each scenario has its
// own namespace, reference provider and manager (test/testharness). The scenarios: discovering and
// following a server's tools, and the calls of its Tools (discovery_test.go), how the end of an
// mcp-call Job reads (executor_test.go), hostile servers (hostile_test.go), and how an MCPServer
// reads for kstatus and Argo CD (kstatus_test.go). Fuzz targets and -list need no cluster: th.Main
// starts none for them, and env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
