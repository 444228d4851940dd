package mcpclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The stable classes of a failed session (Error.Summary): what the status of an object that names a
// server may say. None carries the error's own text, which can name addresses, ports and what
// answered there (whoever writes an MCPServer must not learn the manager's network from it).
const (
	SummaryUnreachable = "could not connect"
	SummaryTLS         = "TLS handshake failed"
	SummaryTimeout     = "the server did not answer in time"
	SummaryNotMCP      = "the server did not answer as an MCP server"
)

// Error is why a session with the server failed: Summary is stable and reveals nothing of the
// network (one of the Summary constants, "HTTP <status>", or a LimitError's message); Err is the
// detail, for the log. A LimitError is found in it with errors.As.
type Error struct {
	Summary string
	Err     error
}

func (e *Error) Error() string { return e.Summary + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// classify makes err, the failure of a session that g guarded within ctx, an *Error.
func (g *guard) classify(ctx context.Context, err error) *Error {
	exceeded, netErr, status := g.state()
	switch {
	case exceeded != nil:
		return &Error{exceeded.Error(), errors.Join(exceeded, err)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &Error{SummaryTimeout, err}
	case netErr != nil && isTLS(netErr):
		return &Error{SummaryTLS, fmt.Errorf("%w (%v)", err, netErr)}
	case netErr != nil:
		return &Error{SummaryUnreachable, fmt.Errorf("%w (%v)", err, netErr)}
	case status != 0:
		return &Error{fmt.Sprintf("HTTP %d", status), err}
	}
	return &Error{SummaryNotMCP, err}
}

// isTLS reports whether err is a failed TLS handshake or certificate check.
func isTLS(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		record  tls.RecordHeaderError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) ||
		strings.Contains(err.Error(), "tls: ")
}

// jsonSize is the size of v as JSON.
func jsonSize(v any) (int, error) {
	b, err := json.Marshal(v)
	return len(b), err
}
