package reference

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

// Quorum. A request may need the approvals of several distinct approvers: Options.Quorum for the
// whole provider, or a provisioned instance's own setting (PUT /admin/v1/instances/{id}/quorum),
// fixed on each request when it is created. An approve or deny through the admin API or the approval
// page is a vote {approver, approve|deny, note, at}, recorded on the request:
//
//   - one approver counts once: approving again is accepted and changes nothing;
//   - the requester (context.requester.username, as Toolgate sends it) never approves their own call
//     (ErrOwnCall, 403 forbidden): an approver of Options.Approvers of that name is refused. The
//     admin credential, recorded as AdminApprover, names nobody in the cluster, so a cluster user
//     who happens to be called "admin" does not lock it out;
//   - any deny decides at once: denied, with that approver's note;
//   - the request turns approved when the last approval needed arrives, with the approvers' notes;
//     its validity is that last approval's (valid_for or expires_at, or the provider's default).
//
// Everything happens under s.mu, so concurrent votes end in one transition, one decision and one
// notification. Until the quorum is reached the request stays pending on the provider API: AAP's
// ApprovalRequest has no field for votes and refuses additional ones, so the votes are shown only
// by the admin API (AdminRequest) and the approval page. Decisions through the Go API
// (Server.Decide) are no votes: they decide at once, as the provider's owner.

// MaxQuorum bounds the distinct approvals a request may need.
const MaxQuorum = 32

// Votes.
const (
	VoteApprove = "approve"
	VoteDeny    = "deny"
)

// ErrOwnCall refuses the approval of a call by the approver who asked for it.
var ErrOwnCall = errors.New("the requester cannot approve their own call")

// Vote is one approver's approve or deny on a request.
type Vote struct {
	Approver string    `json:"approver"`
	Vote     string    `json:"vote"`
	Note     string    `json:"note,omitempty"`
	At       time.Time `json:"at"`
}

// required is how many distinct approvals a request needs; requests stored before quorums existed
// need one.
func (rec record) required() int { return max(rec.Quorum, 1) }

// approvals is how many distinct approvers have approved.
func (rec record) approvals() int {
	n := 0
	for _, v := range rec.Votes {
		if v.Vote == VoteApprove {
			n++
		}
	}
	return n
}

// approvedBy reports whether approver has approved already.
func (rec record) approvedBy(approver string) bool {
	for _, v := range rec.Votes {
		if v.Vote == VoteApprove && v.Approver == approver {
			return true
		}
	}
	return false
}

// needed is how many more approvals a pending request needs; 0 once it is terminal.
func (rec record) needed() int {
	if rec.Status != provider.StatusPending {
		return 0
	}
	return max(rec.required()-rec.approvals(), 0)
}

// requester is the username the request's context names as who asked for the call
// (context.requester.username), or "" if it names none.
func (rec record) requester() string {
	var ctx struct {
		Requester struct {
			Username string `json:"username"`
		} `json:"requester"`
	}
	if len(rec.Context) == 0 || json.Unmarshal(rec.Context, &ctx) != nil {
		return ""
	}
	return ctx.Requester.Username
}

// quorumLocked is how many approvals a new request of an instance needs.
func (s *Server) quorumLocked(instance string) int {
	if ir, ok := s.instances[instance]; ok && ir.Quorum > 0 {
		return ir.Quorum
	}
	return max(s.opts.Quorum, 1)
}

// vote records an approver's approve (status approved) or deny (denied) on a pending request and
// decides it when the vote settles it. An approval is valid until expiresAt, or for validFor (the
// default if <= 0), from the decision. It returns the request as it is afterwards; ErrNotFound,
// ErrInvalidDecision, ErrOwnCall, or ErrAlreadyTerminal with the current request.
func (s *Server) vote(id, approver, status, note string, expiresAt *time.Time, validFor time.Duration) (record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if status != provider.StatusApproved && status != provider.StatusDenied {
		return record{}, fmt.Errorf("%w: a decision is approved or denied, not %q", ErrInvalidDecision, status)
	}
	rec, err := s.loadLocked(id)
	switch {
	case err != nil:
		return rec, err
	case rec.Status != provider.StatusPending:
		return rec, ErrAlreadyTerminal
	case status == provider.StatusDenied:
		rec.Votes = append(rec.Votes, Vote{Approver: approver, Vote: VoteDeny, Note: note, At: s.now()})
		return s.decideRecordLocked(rec, status, decisionNote(note, status, approver), nil, 0)
	case approver != AdminApprover && rec.requester() == approver:
		return rec, fmt.Errorf("%w: %s asked for this call (its context.requester.username), so another approver must approve it",
			ErrOwnCall, approver)
	case rec.approvedBy(approver):
		return rec, nil // counted once however often
	}
	rec.Votes = append(rec.Votes, Vote{Approver: approver, Vote: VoteApprove, Note: note, At: s.now()})
	if rec.needed() > 0 {
		if err := s.store.putRequest(rec); err != nil {
			return record{}, err
		}
		s.log.Info("approval recorded", "id", rec.ID, "approver", approver, "approvals", rec.approvals(), "required", rec.required())
		return rec, nil
	}
	return s.decideRecordLocked(rec, status, quorumNote(rec), expiresAt, validFor)
}

// quorumNote is an approval's note: each approver's, in the order they approved, with who they are.
func quorumNote(rec record) string {
	var notes []string
	for _, v := range rec.Votes {
		if v.Vote == VoteApprove {
			notes = append(notes, decisionNote(v.Note, provider.StatusApproved, v.Approver))
		}
	}
	return strings.Join(notes, "; ")
}

// putRequest overwrites a stored request.
func (st *store) putRequest(rec record) error {
	return st.db.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketRequests), rec.ID, rec) })
}

// putInstance overwrites a stored instance.
func (st *store) putInstance(ir instanceRecord) error {
	return st.db.Update(func(tx *bolt.Tx) error { return put(tx.Bucket(bucketInstances), ir.ID, ir) })
}

// InstanceQuorum is an instance's quorum as the admin API shows it: the approvals its new requests
// need, and whether that is the provider's default (Options.Quorum) rather than its own.
type InstanceQuorum struct {
	InstanceID string `json:"instance_id"`
	Approvals  int    `json:"approvals"`
	Default    bool   `json:"default"`
}

// quorumBody is the body of PUT /admin/v1/instances/{id}/quorum: 0 returns to the provider's default.
type quorumBody struct {
	Approvals *int `json:"approvals"`
}

func (s *Server) quorumRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/v1/instances/{id}/quorum", s.adminAPI(s.handleGetQuorum))
	mux.Handle("PUT /admin/v1/instances/{id}/quorum", s.adminAPI(s.handleSetQuorum))
}

// quorumTarget returns the provisioned instance a quorum request names; the default instance takes
// the provider's quorum.
func (s *Server) quorumTarget(id string) (instanceRecord, reply, bool) {
	if id == s.defaultInstance.ID {
		return instanceRecord{}, fail(provider.CodeInvalidRequest, "the default instance (the static credential's) takes the provider's quorum: "+
			"set it with serve --quorum (Options.Quorum)"), false
	}
	ir, ok := s.instances[id]
	if !ok || ir.deleted() {
		return instanceRecord{}, fail(provider.CodeNotFound, "no instance "+quote(id)+": name a provisioned instance by the id the provider issued"), false
	}
	return ir, reply{}, true
}

func (s *Server) quorumOf(ir instanceRecord) InstanceQuorum {
	return InstanceQuorum{InstanceID: ir.ID, Approvals: s.quorumLocked(ir.ID), Default: ir.Quorum == 0}
}

func (s *Server) handleGetQuorum(r *http.Request) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, rp, ok := s.quorumTarget(r.PathValue("id"))
	if !ok {
		return rp
	}
	return success(http.StatusOK, s.quorumOf(ir))
}

func (s *Server) handleSetQuorum(r *http.Request) reply {
	var body quorumBody
	if err := decodeJSON(r, &body); err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	if body.Approvals == nil || *body.Approvals < 0 || *body.Approvals > MaxQuorum {
		return failParam(provider.CodeInvalidRequest, "approvals", fmt.Sprintf(
			"approvals must be the number of distinct approvers the instance's requests need, from 1 to %d (0: the provider's default)", MaxQuorum))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ir, rp, ok := s.quorumTarget(r.PathValue("id"))
	if !ok {
		return rp
	}
	ir.Quorum = *body.Approvals
	if err := s.store.putInstance(ir); err != nil {
		return s.failure(err, "")
	}
	s.instances[ir.ID] = ir
	s.log.Info("instance quorum set", "instance", ir.ID, "approvals", s.quorumLocked(ir.ID))
	return success(http.StatusOK, s.quorumOf(ir))
}
