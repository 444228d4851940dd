package reference

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"toolgate.dev/toolgate/internal/provider"
)

// Authentication. The page is protected by the admin credential, exactly like the admin API, or by an
// approver's own credential (Options.Approvers), which signs them in by name: their decisions record
// it. A browser signs in once through the form the page shows, which POSTs the credential in the body
// to /ui/sign-in (same-origin only, as the actions); a credential in the address is refused, since it
// would stay in the browser's history and in logs. Sign-in sets a session cookie (HttpOnly,
// SameSite=Strict, Path=/ui/, Secure over TLS) and redirects to /ui/. The cookie holds an expiry, the
// approver's name and an HMAC of both under a key drawn at random when the server starts; it never
// holds the credential, cannot be used against the admin API, ends after sessionLifetime, and
// restarting the provider ends every session. Everything under /ui/ except the sign-in itself needs
// the cookie; an Authorization header is not accepted there.

// maxSignInBody bounds the sign-in form's body.
const maxSignInBody = 4 << 10

// handleSignIn checks the credential posted by the sign-in form and starts a session.
func (p *approvalPage) handleSignIn(w http.ResponseWriter, r *http.Request) {
	if err := p.csrf.Check(r); err != nil {
		write(w, fail(provider.CodeForbidden, "cross-origin sign-in refused: sign in from the approval page itself ("+err.Error()+")"))
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/x-www-form-urlencoded" {
		write(w, fail(provider.CodeInvalidRequest, "sign in with the form of /ui/: the body must be application/x-www-form-urlencoded"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxSignInBody)
	if err := r.ParseForm(); err != nil {
		write(w, fail(provider.CodeInvalidRequest, "the sign-in form could not be read: "+err.Error()))
		return
	}
	approver, ok := p.s.approverFor(r.PostForm.Get("token"))
	if !ok {
		signInPage(w, http.StatusUnauthorized, "That is not the admin credential or an approver's credential of this provider.")
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     sessionCookie,
		Value:    p.newSession(approver, p.s.clock.Now().Add(sessionLifetime)),
		Path:     "/ui/",
		MaxAge:   int(sessionLifetime / time.Second),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	pageHeaders(w, "text/html; charset=utf-8")
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// session wraps a handler that needs the session cookie.
func (p *approvalPage) session(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !p.signedIn(r) {
			write(w, signInRequired())
			return
		}
		h(w, r)
	})
}

func signInRequired() reply {
	return fail(provider.CodeUnauthenticated, "no valid session: sign in at /ui/ with the admin credential or your approver credential")
}

// newSession returns a session cookie value for approver that expires at expiry:
// "<unix seconds>.<approver, base64url>.<mac>".
func (p *approvalPage) newSession(approver string, expiry time.Time) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	who := base64.RawURLEncoding.EncodeToString([]byte(approver))
	return exp + "." + who + "." + p.mac(exp, who)
}

func (p *approvalPage) mac(exp, who string) string {
	m := hmac.New(sha256.New, p.sessionKey)
	m.Write([]byte("toolgate approval page session\x00" + exp + "\x00" + who))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (p *approvalPage) signedIn(r *http.Request) bool {
	_, _, ok := p.sessionOf(r)
	return ok
}

// approver is who signed the request's session in; empty without a valid session.
func (p *approvalPage) approver(r *http.Request) string {
	who, _, _ := p.sessionOf(r)
	return who
}

// sessionExpiry returns when the request's session ends; ok is false without a valid session.
func (p *approvalPage) sessionExpiry(r *http.Request) (expiry time.Time, ok bool) {
	_, expiry, ok = p.sessionOf(r)
	return expiry, ok
}

// sessionOf returns who signed the request's session in and when it ends; ok is false without a
// valid session.
func (p *approvalPage) sessionOf(r *http.Request) (approver string, expiry time.Time, ok bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", time.Time{}, false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 || !hmac.Equal([]byte(parts[2]), []byte(p.mac(parts[0], parts[1]))) {
		return "", time.Time{}, false
	}
	unix, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	who, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || len(who) == 0 {
		return "", time.Time{}, false
	}
	expiry = time.Unix(unix, 0)
	if !p.s.clock.Now().Before(expiry) {
		return "", time.Time{}, false
	}
	return string(who), expiry, true
}
