package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
	"toolgate.dev/toolgate/test/mcpeverything"
	th "toolgate.dev/toolgate/test/testharness"
)

// The command as a Job runs it: its env, the result in the termination log, the outcome's exit code.
func TestCommandWritesTheResultAndExitsWithTheOutcome(t *testing.T) {
	srv := mcpeverything.Start(t)
	bin := th.Binary(t, "./cmd/mcp-call")
	for _, c := range []struct {
		name, tool, args, want string
		exit                   int
	}{
		{"result", "echo", `{"message":"hi $(HOME)"}`, "Echo: hi $(HOME)", mcpcall.ExitSucceeded},
		{"not an object", "echo", `[]`, "mcp-call: TOOL_ARGUMENTS is not a JSON object. The tool was not called.", mcpcall.ExitNotRun},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "termination-log")
			cmd := exec.Command(bin)
			cmd.Env = []string{
				mcpclient.EnvURL + "=" + srv.URL, mcpclient.EnvAllowInsecureHTTP + "=true", mcpclient.EnvTool + "=" + c.tool,
				"TOOL_ARGUMENTS=" + c.args, "TERMINATION_LOG=" + log,
			}
			err := cmd.Run()
			code := 0
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.exit {
				t.Errorf("exit code %d, want %d", code, c.exit)
			}
			got, err := os.ReadFile(log)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Errorf("termination log %q, want %q", got, c.want)
			}
		})
	}
}
