package toolcalls_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every scenario of the ToolCall controller shares; each scenario has its
// own namespace, reference provider and manager (test/testharness). The scenarios, by what they
// test: a call from submission to its result (lifecycle_test.go), deletion (deletion_test.go), the
// approval rules (policy_test.go), asynchronous mode through the receiver (async_test.go), a manager
// that dies between two writes (crash_test.go), removal despite the finalizer (gonereplay_test.go),
// retention (retention_test.go), and the attacks of docs/security.md: forged acceptance records
// (acceptance_bypass_test.go), forged status (trust_test.go), forged Jobs and Pods
// (execution_record_test.go), the provider's credential and TLS (security_test.go). Fuzz targets
// and -list need no cluster: th.Main starts none for them, and env is nil.
var env *th.Env

func TestMain(m *testing.M) { th.Main(m, &env) }
