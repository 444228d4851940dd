package main_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
		extraEnv, flags        []string
	}{
		{"result", "echo", `{"message":"hi $(HOME)"}`, "Echo: hi $(HOME)", mcpcall.ExitSucceeded, nil, nil},
		{"not an object", "echo", `[]`, "mcp-call: TOOL_ARGUMENTS is not a JSON object. The tool was not called.", mcpcall.ExitNotRun, nil, nil},
		{"answer over the env's bound", "echo", `{"message":"` + strings.Repeat("x", 40000) + `"}`,
			"The MCP server's answer to the call to echo was larger than 16384 bytes (MCP_MAX_RESPONSE_BYTES), so mcp-call stopped reading it: " +
				"the tool may have run. It is not called again; check the tool's own records.",
			mcpcall.ExitMayHaveRun, []string{mcpcall.EnvMaxResponseBytes + "=16384"}, nil},
		{"the flag over the env", "echo", `{"message":"` + strings.Repeat("x", 40000) + `"}`, mcpcall.Cut("Echo: "+strings.Repeat("x", 40000), mcpcall.MaxMessageBytes),
			mcpcall.ExitSucceeded, []string{mcpcall.EnvMaxResponseBytes + "=16384"}, []string{"--max-response-bytes=1048576"}},
		{"a bound that is no number", "echo", `{"message":"x"}`,
			`mcp-call: MCP_MAX_RESPONSE_BYTES (or --max-response-bytes) is "1Mi": set it to a positive number of bytes, such as 1048576 (the default), or leave it unset. The tool was not called.`,
			mcpcall.ExitNotRun, []string{mcpcall.EnvMaxResponseBytes + "=1Mi"}, nil},
		{"a preview cut to its maxBytes", "echo", `{"message":"` + strings.Repeat("x", 1000) + `"}`, mcpcall.Cut("Echo: "+strings.Repeat("x", 1000), 100),
			mcpcall.ExitSucceeded, []string{mcpcall.EnvMode + "=preview", mcpcall.EnvPreviewMaxBytes + "=100"}, nil},
		{"maxBytes outside preview mode", "echo", `{"message":"` + strings.Repeat("x", 1000) + `"}`, "Echo: " + strings.Repeat("x", 1000),
			mcpcall.ExitSucceeded, []string{mcpcall.EnvMode + "=execute", mcpcall.EnvPreviewMaxBytes + "=100"}, nil},
		{"a preview's maxBytes that is no number", "echo", `{"message":"x"}`,
			`mcp-call: TOOLGATE_PREVIEW_MAX_BYTES is "4k": in preview mode (TOOLGATE_MODE=preview) it must be a number of bytes from 1 to 4000, the Tool's spec.preview.maxBytes, which the manager sets; leave it unset for 4000. The tool was not called.`,
			mcpcall.ExitNotRun, []string{mcpcall.EnvMode + "=preview", mcpcall.EnvPreviewMaxBytes + "=4k"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "termination-log")
			cmd := exec.Command(bin, c.flags...)
			cmd.Env = append([]string{
				mcpclient.EnvURL + "=" + srv.URL, mcpclient.EnvAllowInsecureHTTP + "=true", mcpclient.EnvTool + "=" + c.tool,
				"TOOL_ARGUMENTS=" + c.args, "TERMINATION_LOG=" + log,
			}, c.extraEnv...)
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
