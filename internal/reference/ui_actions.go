package reference

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"toolgate.dev/toolgate/internal/provider"
)

// Cross-site request forgery. The actions require, besides the cookie: a same-origin request as
// http.CrossOriginProtection judges it (Sec-Fetch-Site, or Origin against Host), and a JSON body
// (Content-Type application/json), which an HTML form on another site cannot send. SameSite=Strict
// keeps the cookie off cross-site requests in the first place. Cross-origin actions get 403.
//
// Decisions. Approve takes valid_for_minutes, a whole number of minutes from 1 to maxValidity (or to
// Options.DefaultApprovalValidity if that is longer); anything else is refused with 400, never
// clamped. The approval's expires_at is the server clock's now plus that. Deny requires a note (the
// agent and the audit trail read it; an empty reason helps nobody). Both accept a note of at most
// maxNoteLength characters.

// action wraps a decision handler: same-origin check, session, JSON body.
func (p *approvalPage) action(h func(r *http.Request, body []byte) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := p.csrf.Check(r); err != nil {
			write(w, fail(provider.CodeForbidden,
				"cross-origin request refused: approve and deny only from the approval page itself ("+err.Error()+")"))
			return
		}
		if !p.signedIn(r) {
			write(w, signInRequired())
			return
		}
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != provider.ContentTypeJSON {
			write(w, fail(provider.CodeInvalidRequest, "the body must be JSON: send Content-Type: application/json"))
			return
		}
		var raw json.RawMessage
		if err := decodeJSON(r, &raw); err != nil {
			write(w, fail(provider.CodeInvalidRequest, err.Error()))
			return
		}
		write(w, h(r, raw))
	})
}

// approveBody is the body of POST /ui/api/requests/{id}/approve.
type approveBody struct {
	ValidForMinutes json.RawMessage `json:"valid_for_minutes"`
	Note            string          `json:"note"`
}

// denyBody is the body of POST /ui/api/requests/{id}/deny.
type denyBody struct {
	Note string `json:"note"`
}

func (p *approvalPage) handleApprove(r *http.Request, data []byte) reply {
	var body approveBody
	if err := json.Unmarshal(data, &body); err != nil {
		return fail(provider.CodeInvalidRequest, "the body is not valid: "+err.Error())
	}
	minutes, err := p.validForMinutes(body.ValidForMinutes)
	if err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	note, err := checkNote(body.Note, false)
	if err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	return p.decide(r.PathValue("id"), provider.StatusApproved, note, time.Duration(minutes)*time.Minute, p.approver(r))
}

func (p *approvalPage) handleDeny(r *http.Request, data []byte) reply {
	var body denyBody
	if err := json.Unmarshal(data, &body); err != nil {
		return fail(provider.CodeInvalidRequest, "the body is not valid: "+err.Error())
	}
	note, err := checkNote(body.Note, true)
	if err != nil {
		return fail(provider.CodeInvalidRequest, err.Error())
	}
	return p.decide(r.PathValue("id"), provider.StatusDenied, note, 0, p.approver(r))
}

// validForMinutes reads valid_for_minutes: a whole number from 1 to maxMinutes.
func (p *approvalPage) validForMinutes(raw json.RawMessage) (int64, error) {
	bounds := fmt.Sprintf("a whole number of minutes from 1 to %d", p.maxMinutes())
	text := strings.TrimSpace(string(raw))
	if text == "" || text == "null" {
		return 0, fmt.Errorf("valid_for_minutes is required: give %s", bounds)
	}
	minutes, err := strconv.ParseInt(text, 10, 64)
	if err != nil || minutes < 1 || minutes > int64(p.maxMinutes()) {
		return 0, fmt.Errorf("valid_for_minutes must be %s, not %s", bounds, text)
	}
	return minutes, nil
}

// checkNote trims a note and checks its length; a denial needs one.
func checkNote(note string, required bool) (string, error) {
	note = strings.TrimSpace(note)
	if required && note == "" {
		return "", errors.New("note is required to deny: say why, the agent and the audit trail read it")
	}
	if n := len([]rune(note)); n > maxNoteLength {
		return "", fmt.Errorf("note has %d characters; shorten it to at most %d", n, maxNoteLength)
	}
	return note, nil
}

// decide records the signed-in approver's vote (quorum.go), which may decide the request.
func (p *approvalPage) decide(id, status, note string, validFor time.Duration, approver string) reply {
	if !p.s.seesRequest(approver, id) {
		return fail(provider.CodeNotFound, "no request "+quote(id))
	}
	rec, err := p.s.vote(id, approver, status, note, nil, validFor)
	if errors.Is(err, ErrAlreadyTerminal) {
		return fail(provider.CodeAlreadyTerminal, "the request is already "+rec.Status+": its outcome is unchanged")
	}
	if err != nil {
		return p.s.failure(err, "no request "+quote(id))
	}
	if rec.Status == provider.StatusPending {
		p.created.notify() // the other approvers' pages show the vote
	}
	p.s.log.Info("voted on the approval page", "id", rec.ID, "status", rec.Status, "approver", approver)
	return success(http.StatusOK, p.s.adminRequest(id))
}
