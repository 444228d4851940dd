package toolcall_test

import (
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every test of this package shares; each test has its own namespace,
// reference provider and manager (test/testharness).
var env *th.Env

// agent is the user the tests call Toolgate as: it holds nothing but the agent ClusterRole from
// config/rbac/toolcall_agent_role.yaml, bound per test namespace by agent.Bind.
var agent *th.Agent

func TestMain(m *testing.M) {
	th.Main(m, &env, func(e *th.Env) (err error) {
		agent, err = e.AddAgent("")
		return err
	})
}
