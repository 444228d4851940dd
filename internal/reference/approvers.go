package reference

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// Who decided. An AAP decision has no field for the approver, so the reference provider records
// it in the decision's note, which every client shows (Toolgate copies it into the ToolCall's
// status.decision.note): "<note> (approved by alice)", or "approved by alice" without a note. The
// approver is who signed in to the approval page, or whose credential called the admin API: an
// approver of Options.Approvers by name, or AdminApprover for the admin credential. Decisions made
// through the Go API (Server.Decide) name no approver and keep their note as given.

// AdminApprover is the approver a decision made with the admin credential records.
const AdminApprover = "admin"

// approverName is what an approver may be called: it appears in notes and on the page.
var approverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,63}$`)

// hashApprovers checks Options.Approvers and indexes them by the hash of their credential.
func hashApprovers(opts Options) (map[[sha256.Size]byte]string, error) {
	out := map[[sha256.Size]byte]string{}
	for name, cred := range opts.Approvers {
		if !approverName.MatchString(name) {
			return nil, fmt.Errorf("approver name %q: use 1 to 64 letters, digits and . _ @ + - (starting with a letter or digit)", name)
		}
		if name == AdminApprover {
			return nil, fmt.Errorf("approver name %q is the name decisions made with the admin credential record: choose another", name)
		}
		if cred == "" {
			return nil, fmt.Errorf("approver %s has an empty credential", name)
		}
		if cred == opts.Credential || cred == opts.AdminCredential || cred == opts.ProvisionerToken {
			return nil, fmt.Errorf("approver %s's credential is the instance, admin or provisioner credential: give each approver their own", name)
		}
		h := sha256.Sum256([]byte(cred))
		if other, dup := out[h]; dup {
			return nil, fmt.Errorf("approvers %s and %s share a credential: give each their own", other, name)
		}
		out[h] = name
	}
	return out, nil
}

// approverFor returns who holds token: AdminApprover for the admin credential, an approver's name for
// theirs; ok is false for anything else.
func (s *Server) approverFor(token string) (name string, ok bool) {
	if token == "" {
		return "", false
	}
	got := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(got[:], s.admin[:]) == 1 {
		return AdminApprover, true
	}
	name, ok = s.approvers[got]
	return name, ok
}

// approverAPI wraps an admin handler that approvers may use too (listing and deciding): it
// authenticates the admin credential or an approver's, and passes on who it is.
func (s *Server) approverAPI(h func(r *http.Request, approver string) reply) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, found := strings.Cut(r.Header.Get("Authorization"), " ")
		name, ok := s.approverFor(token)
		if !found || !strings.EqualFold(scheme, "Bearer") || !ok {
			write(w, unauthenticated("the admin credential or an approver's credential is required"))
			return
		}
		write(w, h(r, name))
	})
}

// decisionNote records the approver in a decision's note.
func decisionNote(note, status, approver string) string {
	by := fmt.Sprintf("%s by %s", status, approver)
	if note == "" {
		return by
	}
	return note + " (" + by + ")"
}
