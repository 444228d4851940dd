package reference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference/faults"
)

// The admin API: approvers list and decide requests (of the instances they see), the admin also
// grants scoped approvers instances (approver_grants.go), sets fault rules and reads the counters. It is not part of AAP; its errors are ErrorResponses all the same.

// AdminRequest is a request as the admin API shows it: AAP's ApprovalRequest, the instance it belongs
// to and the Idempotency-Key that created it.
type AdminRequest struct {
	provider.Request
	InstanceID     string `json:"instance_id"`
	InstanceName   string `json:"instance_name"`
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// ApprovalsRequired is how many distinct approvals the request needs, and ApprovalsNeeded how many
	// more (0 once it is terminal); Votes are the approvers' votes so far (quorum.go).
	ApprovalsRequired int    `json:"approvals_required"`
	ApprovalsNeeded   int    `json:"approvals_needed"`
	Votes             []Vote `json:"votes,omitempty"`
}

func (s *Server) adminRoutes(mux *http.ServeMux) {
	mux.Handle("POST /admin/v1/requests/{id}/decide", s.approverAPI(s.handleDecide))
	mux.Handle("GET /admin/v1/requests", s.approverAPI(s.handleList))
	mux.Handle("GET /admin/v1/faults", s.adminAPI(s.withFaults(s.handleFaultsGet)))
	mux.Handle("POST /admin/v1/faults", s.adminAPI(s.withFaults(s.handleFaultsAdd)))
	mux.Handle("PUT /admin/v1/faults", s.adminAPI(s.withFaults(s.handleFaultsSet)))
	mux.Handle("DELETE /admin/v1/faults", s.adminAPI(s.withFaults(s.handleFaultsClear)))
	mux.Handle("GET /admin/v1/stats", s.adminAPI(s.handleStats))
	mux.Handle("GET /admin/v1/keys", s.adminAPI(s.handleKeys))
	s.grantRoutes(mux)
	s.quorumRoutes(mux)
}

// adminAPI wraps an admin handler: it authenticates with the admin credential and writes the reply.
func (s *Server) adminAPI(h func(*http.Request) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !matches(r, s.admin) {
			write(w, unauthenticated("the admin credential is required"))
			return
		}
		write(w, h(r))
	})
}

// adminView is a stored request as the admin API shows it.
func (s *Server) adminView(rec record, names map[string]string) AdminRequest {
	return AdminRequest{Request: s.view(rec), InstanceID: rec.Instance, InstanceName: names[rec.Instance], IdempotencyKey: rec.Key,
		ApprovalsRequired: rec.required(), ApprovalsNeeded: rec.needed(), Votes: rec.Votes}
}

// adminDecision is the body of POST /admin/v1/requests/{id}/decide.
type adminDecision struct {
	Status    string     `json:"status"`
	Note      string     `json:"note,omitempty"`
	ValidFor  string     `json:"valid_for,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (s *Server) handleDecide(r *http.Request, approver string) reply {
	var body adminDecision
	if err := decodeJSON(r, &body); err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	validFor, err := parseOptionalDuration("valid_for", body.ValidFor)
	if err != nil || validFor < 0 {
		return failParam(provider.CodeInvalidRequest, "valid_for", fmt.Sprintf("valid_for %q is not a positive duration such as 10m", body.ValidFor))
	}
	id := r.PathValue("id")
	if !s.seesRequest(approver, id) {
		return fail(provider.CodeNotFound, "no request "+quote(id))
	}
	rec, err := s.vote(id, approver, body.Status, body.Note, body.ExpiresAt, validFor)
	if errors.Is(err, ErrAlreadyTerminal) {
		return fail(provider.CodeAlreadyTerminal, "the request is already "+rec.Status+": its outcome is unchanged")
	}
	if err != nil {
		return s.failure(err, "no request "+quote(id))
	}
	s.log.Info("voted through the admin API", "id", rec.ID, "status", rec.Status, "approver", approver)
	return success(http.StatusOK, s.adminRequest(id))
}

// adminRequest reads a request for the admin API.
func (s *Server) adminRequest(id string) AdminRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadLocked(id)
	if err != nil {
		return AdminRequest{}
	}
	return s.adminView(rec, s.instanceNamesLocked())
}

// handleList lists requests, newest first: ?status= one status, ?instance= one instance's.
func (s *Server) handleList(r *http.Request, approver string) reply {
	status, instance := r.URL.Query().Get("status"), r.URL.Query().Get("instance")
	if status != "" && status != provider.StatusPending && !provider.IsTerminal(status) {
		return failParam(provider.CodeInvalidRequest, "status", fmt.Sprintf("unknown status %q: use pending, approved, denied, expired or cancelled", status))
	}
	recs, err := s.listRecords(status)
	if err != nil {
		return s.failure(err, "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.instanceNamesLocked()
	out := make([]AdminRequest, 0, len(recs))
	for _, rec := range recs {
		if (instance == "" || rec.Instance == instance) && s.sees(approver, rec.Instance) {
			out = append(out, s.adminView(rec, names))
		}
	}
	return success(http.StatusOK, out)
}

// withFaults answers 404 for a server without a fault injector (Options.Faults).
func (s *Server) withFaults(h func(*http.Request) reply) func(*http.Request) reply {
	return func(r *http.Request) reply {
		if s.faults == nil {
			return fail(provider.CodeNotFound, "this provider injects no faults: fault rules are a test hook, given with reference.Options.Faults")
		}
		return h(r)
	}
}

func (s *Server) handleFaultsGet(*http.Request) reply {
	return success(http.StatusOK, s.faults.Rules())
}

// handleFaultsAdd appends one rule (a JSON object).
func (s *Server) handleFaultsAdd(r *http.Request) reply {
	var rule faults.Rule
	if err := decodeJSON(r, &rule); err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	return s.faultsChanged(s.faults.Add(rule))
}

// handleFaultsSet replaces the rules (a JSON array).
func (s *Server) handleFaultsSet(r *http.Request) reply {
	var rules []faults.Rule
	if err := decodeJSON(r, &rules); err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	return s.faultsChanged(s.faults.Set(rules...))
}

func (s *Server) handleFaultsClear(*http.Request) reply {
	s.faults.Clear()
	return success(http.StatusOK, s.faults.Rules())
}

func (s *Server) faultsChanged(err error) reply {
	if err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	rules := s.faults.Rules()
	s.log.Info("fault rules changed", "rules", len(rules))
	return success(http.StatusOK, rules)
}

func (s *Server) handleStats(*http.Request) reply {
	return success(http.StatusOK, s.Stats())
}

// handleKeys answers the audit of idempotency: each Idempotency-Key an instance (?instance=, default
// the static credential's) used, with the id of the one request it created.
func (s *Server) handleKeys(r *http.Request) reply {
	instance := r.URL.Query().Get("instance")
	if instance == "" {
		instance = s.defaultInstance.ID
	}
	keys, err := s.KeysOf(instance)
	if err != nil {
		return s.failure(err, "")
	}
	return success(http.StatusOK, keys)
}

// decodeJSON reads a JSON body into into, refusing unknown fields.
func decodeJSON(r *http.Request, into any) error {
	data, err := io.ReadAll(io.LimitReader(r.Body, provider.MaxRequestBodyBytes+1))
	if err != nil {
		return fmt.Errorf("reading the body: %w", err)
	}
	if int64(len(data)) > provider.MaxRequestBodyBytes {
		return fmt.Errorf("the body exceeds %d bytes", provider.MaxRequestBodyBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("the body is not valid: %w", err)
	}
	if dec.More() {
		return errors.New("the body is not valid: it has more after its JSON value")
	}
	return nil
}

// parseOptionalDuration reads a Go duration from an admin request's field; "" is 0.
func parseOptionalDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	return d, nil
}
