// Package mcpeverything runs the official reference MCP server, @modelcontextprotocol/server-everything
// (pinned by package-lock.json beside this file, installed by hack/install-test-deps.sh), over
// streamable HTTP on a free port, for the tests of the MCPServer controller and of mcp-call. It is a
// server nobody here wrote: its tools (echo, get-sum, get-structured-content, ...) and their schemas
// are its own.
package mcpeverything

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"toolgate.dev/toolgate/test/testenv"
)

// Server is one running server-everything.
type Server struct {
	// URL is its streamable HTTP endpoint, http://127.0.0.1:<port>/mcp.
	URL string

	t    testing.TB
	port int
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Dir is where hack/install-test-deps.sh installs it; the test is skipped (failed under CI) when it
// is not installed.
func Dir(t testing.TB) string {
	t.Helper()
	dir, err := testenv.NPMPackageDir("mcpeverything", filepath.Join("node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		msg := "the reference MCP server: " + err.Error()
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// Start runs the server on a free port until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	s := &Server{t: t, port: port, URL: fmt.Sprintf("http://127.0.0.1:%d/mcp", port)}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// start runs node and returns once the server says it listens.
func (s *Server) start() {
	t := s.t
	t.Helper()
	index := filepath.Join(Dir(t), "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cmd := exec.Command("node", index, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", s.port))
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = nil
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the reference MCP server: %v", err)
	}
	listening := make(chan struct{})
	done := make(chan struct{})
	var lines []string
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		said := false
		for sc.Scan() {
			line := sc.Text()
			if !said {
				lines = append(lines, line)
				if strings.Contains(line, "listening on port") {
					said = true
					close(listening)
				}
			}
		}
		_ = cmd.Wait()
	}()
	select {
	case <-listening:
	case <-done:
		t.Fatalf("the reference MCP server exited before listening: %s", strings.Join(lines, "\n"))
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the reference MCP server did not listen within 60s")
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
}

// Stop kills the server and waits for it to exit; the port is then closed.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Restart starts the server again on the same port after Stop.
func (s *Server) Restart() {
	s.t.Helper()
	s.start()
}
