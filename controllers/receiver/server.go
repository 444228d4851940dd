package receiver

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// Server serves the Receiver over HTTPS on its own address, with the certificate and key in
// a directory (tls.crt, tls.key) that is read again when they change. It runs on every replica, not
// only the leader: what it records goes to the apiserver, and the leader's controllers act on it.
//
// controller-runtime's webhook server (pkg/webhook), built on the same certificate watcher, is not
// used: its http.Server takes no read or write timeout (only a 32 s header timeout and 1 MiB of
// headers), while the receiver faces whoever can reach the provider's path to it and bounds how long
// a sender holds a connection and how much it sends; and it would serve before the cache the
// receiver reads is filled.
type Server struct {
	addr, certDir string
	handler       http.Handler
	log           logr.Logger
	// synced waits until the manager's cache, which the receiver reads, is filled.
	synced func(context.Context) bool
}

// NewServer serves handler on addr with the certificate and key in certDir, once synced reports the
// manager's cache filled.
func NewServer(addr, certDir string, handler http.Handler, log logr.Logger, synced func(context.Context) bool) *Server {
	return &Server{addr: addr, certDir: certDir, handler: handler, log: log, synced: synced}
}

func (s *Server) NeedLeaderElection() bool { return false }

func (s *Server) Start(ctx context.Context) error {
	cw, err := certwatcher.New(filepath.Join(s.certDir, "tls.crt"), filepath.Join(s.certDir, "tls.key"))
	if err != nil {
		return fmt.Errorf("the receiver's certificate in %s (tls.crt, tls.key): %w", s.certDir, err)
	}
	go func() {
		if err := cw.Start(ctx); err != nil {
			s.log.Error(err, "watching the receiver's certificate")
		}
	}()
	if !s.synced(ctx) {
		return ctx.Err()
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("the receiver cannot listen on %s: %w", s.addr, err)
	}
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      15 * time.Second,
		MaxHeaderBytes:    16 << 10,
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cw.GetCertificate},
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.log.Info("serving the AAP webhook receiver", "address", ln.Addr().String(), "path", Path)
	if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	<-done
	return nil
}
