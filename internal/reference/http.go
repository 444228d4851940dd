package reference

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// reply is what a handler answers. A zero status writes nothing (the client went away).
type reply struct {
	status int
	header http.Header
	body   any // provider.Request, provider.ErrorResponse, ...; nil for no body
}

func success(status int, body any) reply { return reply{status: status, body: body} }

// fail is the ErrorResponse of an error code of provider.Codes, with the status and type the table
// gives it.
func fail(code, message string) reply { return failParam(code, "", message) }

// failParam is fail naming the field, header or query parameter that was refused.
func failParam(code, param, message string) reply {
	info, known := provider.Codes[code]
	if !known || info.Status == 0 {
		code, info = provider.CodeInternal, provider.Codes[provider.CodeInternal]
	}
	return reply{status: info.Status, body: provider.ErrorResponse{Error: provider.ErrorBody{
		Type: info.Type, Code: code, Message: message, Param: param,
	}}}
}

// refused is the 400 of a refused field.
func refused(err *fieldError) reply {
	return failParam(provider.CodeInvalidRequest, err.param, err.message)
}

func (rp reply) with(key, value string) reply {
	if rp.header == nil {
		rp.header = http.Header{}
	}
	rp.header.Set(key, value)
	return rp
}

// withRequestID gives every response an X-Request-ID: provider API, admin API, approval page,
// unknown paths. Error bodies repeat it as request_id.
func withRequestID(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(provider.HeaderRequestID, uuid.NewString())
		h.ServeHTTP(w, r)
	})
}

// operations are the paths of the provider API and the methods each serves.
var operations = map[string]string{
	"/v1/requests":                   "POST",
	"/v1/requests/{id}":              "GET, DELETE",
	"/v1/instances":                  "POST",
	"/v1/instances/{id}":             "GET, PATCH, DELETE",
	"/admin/v1/requests":             "GET",
	"/admin/v1/faults":               "GET, POST, PUT, DELETE",
	"/admin/v1/stats":                "GET",
	"/healthz":                       "GET",
	"/admin/v1/requests/{id}/decide": "POST",
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, success(http.StatusOK, map[string]string{"status": "ok"}))
	})
	mux.Handle("POST /v1/requests", s.api(faults.OpSubmit, roleInstance, s.handleSubmit))
	mux.Handle("GET /v1/requests/{id}", s.api(faults.OpGet, roleInstance, s.handleGet))
	mux.Handle("DELETE /v1/requests/{id}", s.api(faults.OpCancel, roleInstance, s.handleCancel))
	mux.Handle("POST /v1/instances", s.api(faults.OpInstances, roleProvisioner, s.handleProvision))
	mux.Handle("GET /v1/instances/{id}", s.api(faults.OpInstances, roleProvisioner, s.handleGetInstance))
	mux.Handle("PATCH /v1/instances/{id}", s.api(faults.OpInstances, roleProvisioner, s.handleUpdateInstance))
	mux.Handle("DELETE /v1/instances/{id}", s.api(faults.OpInstances, roleProvisioner, s.handleDeleteInstance))
	s.adminRoutes(mux)
	for path, methods := range operations {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			write(w, s.shape(fail(provider.CodeNotFound, "no operation "+r.Method+" "+r.URL.Path+": this path serves "+methods)))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		write(w, s.shape(fail(provider.CodeNotFound, "no such endpoint: "+r.URL.Path)))
	})
	return mux
}

// role is who may call an operation: an instance (its credential) or the provisioner (its token).
type role int

const (
	roleInstance role = iota
	roleProvisioner
)

// principal is who a bearer credential belongs to.
type principal struct {
	provisioner bool
	instance    string // the instance of an instance credential
}

// authenticate finds who presents the request's bearer credential; ok is false for none or an
// unknown (or revoked) one.
func (s *Server) authenticate(r *http.Request) (p principal, ok bool) {
	token, ok := bearer(r)
	if !ok {
		return principal{}, false
	}
	got := sha256.Sum256([]byte(token))
	if s.provisioner != nil && subtle.ConstantTimeCompare(got[:], s.provisioner[:]) == 1 {
		return principal{provisioner: true}, true
	}
	if s.credential != nil && subtle.ConstantTimeCompare(got[:], s.credential[:]) == 1 {
		return principal{instance: s.defaultInstance.ID}, true
	}
	s.credMu.RLock()
	cred, ok := s.creds[got]
	s.credMu.RUnlock()
	if !ok || (cred.expiresAt != nil && !s.clock.Now().Before(*cred.expiresAt)) {
		return principal{}, false
	}
	return principal{instance: cred.instance}, true
}

func bearer(r *http.Request) (string, bool) {
	scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}

// matches reports whether the bearer credential of r hashes to want.
func matches(r *http.Request, want [sha256.Size]byte) bool {
	token, ok := bearer(r)
	if !ok {
		return false
	}
	got := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}

func unauthenticated(message string) reply {
	return fail(provider.CodeUnauthenticated, message).with("WWW-Authenticate", "Bearer")
}

// wrongRole is the 403 of a credential that authenticates but may not call the operation.
func wrongRole(need role) reply {
	if need == roleProvisioner {
		return fail(provider.CodeForbidden, "an instance credential cannot manage instances: use the provisioner token")
	}
	return fail(provider.CodeForbidden, "a provisioner token manages instances and cannot make approval requests: use an instance credential")
}

// plainText is an error body of the seed profile: text, not an ErrorResponse.
type plainText string

// shape renders a provider API reply in the server's profile: the seed profile sends errors as
// plain text (the status code says what happened).
func (s *Server) shape(rp reply) reply {
	if e, isError := rp.body.(provider.ErrorResponse); isError && s.opts.Profile == ProfileSeed {
		rp.body = plainText(e.Error.Message)
	}
	return rp
}

// write sends a reply; a zero status sends nothing. An ErrorResponse gets the response's
// X-Request-ID as its request_id.
func write(w http.ResponseWriter, rp reply) {
	if rp.status == 0 {
		return
	}
	for k, v := range rp.header {
		w.Header()[k] = v
	}
	switch b := rp.body.(type) {
	case nil:
		w.WriteHeader(rp.status)
		return
	case plainText:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(rp.status)
		_, _ = io.WriteString(w, string(b)+"\n")
		return
	case provider.ErrorResponse:
		b.Error.RequestID = w.Header().Get(provider.HeaderRequestID)
		rp.body = b
	}
	w.Header().Set("Content-Type", provider.ContentTypeJSON)
	w.WriteHeader(rp.status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // arguments and context go back as they were sent
	_ = enc.Encode(rp.body)  // a failed write means the client went away
}

// failure maps an error of the Go API to its reply; notFound is the message of a 404.
func (s *Server) failure(err error, notFound string) reply {
	var fe *fieldError
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, errInstanceNotFound):
		return fail(provider.CodeNotFound, notFound)
	case errors.Is(err, errRevoked):
		return unauthenticated("the credential was revoked: its instance has been deleted")
	case errors.As(err, &fe):
		return refused(fe)
	case errors.Is(err, ErrInvalidDecision):
		return fail(provider.CodeInvalidRequest, err.Error())
	case errors.Is(err, ErrOwnCall):
		return fail(provider.CodeForbidden, err.Error())
	}
	s.log.Error(err, "internal error")
	return fail(provider.CodeInternal, "the provider could not complete the operation")
}
