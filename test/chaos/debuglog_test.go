package chaos

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"toolgate.dev/toolgate/internal/reference"
	th "toolgate.dev/toolgate/test/testharness"
)

// With -chaos.logs, a run keeps what a failure needs to be understood: every manager process's log
// (at debug level), the provider's log of state changes, and an access log of every provider API call
// (method, path, status, when it arrived and when it was answered). The access log comes from a
// logging front of the provider's own handler that the managers are pointed at; it changes nothing
// in the provider's answers or faults.

// debugProvider has the provider log its state changes into the run's log directory.
func debugProvider(t *testing.T, run string) func(*reference.Options) {
	return func(o *reference.Options) {
		if *logsTo == "" {
			return
		}
		f, err := createLog(t, fmt.Sprintf("%s-provider.log", run))
		if err != nil {
			t.Fatal(err)
		}
		o.Logger = zap.New(zap.WriteTo(f), zap.UseDevMode(false))
	}
}

// debugFront serves the provider's handler behind an access log and points the managers at it.
func debugFront(t *testing.T, h *th.Harness, run string) {
	if *logsTo == "" {
		return
	}
	f, err := createLog(t, fmt.Sprintf("%s-access.log", run))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	inner := h.Provider.Handler()
	front := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		lw := &loggedWriter{ResponseWriter: w}
		defer func() {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintf(f, "%s %s %s %s -> %d at %s\n", start.UTC().Format("15:04:05.000"), r.RemoteAddr, r.Method, r.URL.RequestURI(),
				lw.status, time.Now().UTC().Format("15:04:05.000"))
		}()
		inner.ServeHTTP(lw, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.URL = "http://" + ln.Addr().String()
}

// loggedWriter records the status written; a hijacked connection (a dropped or reset one) stays 0.
type loggedWriter struct {
	http.ResponseWriter
	status int
}

func (w *loggedWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (w *loggedWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (the provider's faults hijack it) and
// flush long polls.
func (w *loggedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// createLog creates a log file in the run's log directory; it is closed when the test ends. It may be
// called from any goroutine.
func createLog(t *testing.T, name string) (*os.File, error) {
	if err := os.MkdirAll(*logsTo, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(*logsTo, name))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = f.Close() })
	return f, nil
}

// startManager starts a manager process, logging at debug level when the run keeps its logs, else at
// info level.
func startManager(h *th.Harness, flags ...string) *th.Process {
	// The manager's own namespace, as in the Deployment (the chart passes its release namespace): the
	// gone cursor's Lease lives there (controllers/toolcalls/gonereplay.go). Without it the manager
	// looked for toolgate-system, which the control plane lacks: no position was ever saved, and a
	// removal despite the finalizer between a kill and the next start was never replayed.
	flags = append([]string{"--cluster-resource-namespace", h.NS}, flags...)
	if *logsTo == "" {
		// At info level (the harness's default is error), which keeps the "Receipt signed" lines: the
		// receipts of ToolCalls deleted once they ended are read from them (receipts_test.go).
		return h.StartProcess(append(flags, "--zap-log-level", "info")...)
	}
	return h.StartProcess(append(flags, "--zap-log-level", "debug")...)
}

// keepLog copies the log of the n-th manager process into the run's log directory.
func keepLog(t *testing.T, run string, n int, p *th.Process) {
	if *logsTo == "" {
		return
	}
	f, err := createLog(t, fmt.Sprintf("%s-manager-%03d.log", run, n))
	if err == nil {
		_, err = f.WriteString(p.Log())
	}
	if err != nil {
		t.Errorf("keeping the manager's log: %v", err)
	}
}
