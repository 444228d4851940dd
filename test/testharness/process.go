package testharness

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/procfs"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"toolgate.dev/toolgate/test/testenv"
)

// builds are the binaries Binary built in this test process, by package and build flags.
var builds = struct {
	sync.Mutex
	m map[string]build
}{m: map[string]build{}}

type build struct {
	path string
	err  error
}

// Binary builds the main package pkg (relative to the repository root, e.g. "./cmd/toolgate-mcp"),
// with go build's flags if any, once per test process and returns the binary's path. A failed build
// fails every test that asks for it.
func Binary(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	key := strings.Join(append([]string{pkg}, flags...), " ")
	builds.Lock()
	b, ok := builds.m[key]
	if !ok {
		b.path, b.err = goBuild(pkg, flags)
		builds.m[key] = b
	}
	builds.Unlock()
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// goBuild builds pkg, with flags, into a new temporary directory.
func goBuild(pkg string, flags []string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "toolgate-test-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", append(append([]string{"build", "-o", bin}, flags...), pkg)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin, nil
}

// ManagerBinary builds the manager (./cmd) once per test process and returns its path.
func ManagerBinary(t testing.TB) string {
	t.Helper()
	return Binary(t, "./cmd")
}

// Kubeconfig writes a kubeconfig file for the environment's admin user into dir.
func (e *Env) Kubeconfig(dir string) (string, error) {
	admin, err := e.AddUser(envtest.User{Name: "toolgate-test-admin", Groups: []string{"system:masters"}})
	if err != nil {
		return "", err
	}
	data, err := admin.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

// Process is a manager running as its own OS process, so that it can be killed (SIGKILL) as a
// crash would, and its memory read from /proc.
type Process struct {
	cmd         *exec.Cmd
	done        chan struct{}
	LogPath     string
	MetricsAddr string
}

// StartProcess runs the manager binary against the harness's apiserver, namespace and provider, with
// the harness's timing. Extra flags come last, so they override.
func (h *Harness) StartProcess(extra ...string) *Process {
	h.T.Helper()
	return h.StartBinary(ManagerBinary(h.T), extra...)
}

// StartBinary is StartProcess with another binary that takes the manager's flags (the manager built
// another way, as the benchmarks' baseline is).
func (h *Harness) StartBinary(bin string, extra ...string) *Process {
	h.T.Helper()
	dir := h.T.TempDir()
	kubeconfig, err := h.Env.Kubeconfig(dir)
	if err != nil {
		h.T.Fatal(err)
	}
	metrics, err := FreeAddr()
	if err != nil {
		h.T.Fatal(err)
	}
	tm := h.Opts.Timing
	args := []string{
		"--kubeconfig", kubeconfig,
		"--provider-url", h.URL, "--provider-credential-file", h.CredFile,
		"--namespaces", strings.Join(h.Opts.Namespaces, ","),
		// The manager's own namespace (its execution key, the gone cursor), as the chart passes its
		// release namespace.
		"--cluster-resource-namespace", h.Opts.ClusterResourceNamespace,
		"--poll-wait", h.Opts.PollWait.String(),
		"--return-margin", tm.ReturnMargin.String(), "--final-state-margin", tm.FinalStateMargin.String(),
		"--skew-margin", tm.SkewMargin.String(), "--submit-allowance", tm.SubmitAllowance.String(),
		"--cancel-give-up", h.Opts.CancelGiveUp.String(),
		"--metrics-bind-address", metrics, "--metrics-secure=false", "--health-probe-bind-address", "0",
		"--zap-log-level", "error",
	}
	args = append(args, extra...)
	logFile, err := os.Create(filepath.Join(dir, "manager.log"))
	if err != nil {
		h.T.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		h.T.Fatal(err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{}), LogPath: logFile.Name(), MetricsAddr: metrics}
	go func() { _ = cmd.Wait(); _ = logFile.Close(); close(p.done) }()
	h.T.Cleanup(p.Kill)
	return p
}

// Kill ends the process with SIGKILL and waits for it: no cleanup runs, as in a crash.
func (p *Process) Kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// RSS is the process's resident memory in bytes (from /proc).
func (p *Process) RSS() (int64, error) {
	proc, err := procfs.NewProc(p.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	stat, err := proc.Stat()
	if err != nil {
		return 0, err
	}
	return int64(stat.ResidentMemory()), nil
}

// Log returns the process's log so far (for failure messages).
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// FreeAddr picks a free loopback port.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
