package main

import (
	"fmt"
	"os"
	"testing"

	th "toolgate.dev/toolgate/test/testharness"
)

// env is the control plane every test of this package shares; each test has its own namespace,
// reference provider and manager (test/testharness).
var env *th.Env

// The plugin runs as agent, a user who holds nothing but the agent ClusterRole from
// config/rbac/toolcall_agent_role.yaml (bound per test namespace by agent.Bind). agent.Kubeconfig is
// a kubeconfig file for that user, for tests that go through --kubeconfig.
var agent *th.Agent

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kubectl-toolcall-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	th.Main(m, &env, func(e *th.Env) (err error) {
		agent, err = e.AddAgent(dir)
		return err
	})
	_ = os.RemoveAll(dir)
}
