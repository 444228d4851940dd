package reference

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"toolgate.dev/toolgate/internal/provider"
)

// Authentication. The page is protected by the admin credential, exactly like the admin API: the
// credential the admin API accepts (Options.AdminCredential, or Options.Credential when that is empty)
// is the one the page accepts, so the page is available whenever the admin API is. A browser signs in
// once by opening /ui/?token=<admin credential>: the page checks the token, sets a session cookie
// (HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS) and redirects to /ui/, so the token leaves the
// address bar and the browser history. The cookie holds an expiry and an HMAC of it under a key drawn
// at random when the server starts; it never holds the credential, cannot be used against the admin
// API, ends after sessionLifetime, and restarting the provider ends every session. Everything under
// /ui/ except the sign-in itself needs the cookie; an Authorization header is not accepted there.

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
	return problem(http.StatusUnauthorized, provider.CodeUnauthenticated,
		"no valid session: sign in by opening /ui/?token=<admin credential>")
}

// validToken reports whether token is the admin credential.
func (p *approvalPage) validToken(token string) bool {
	got := sha256.Sum256([]byte(token))
	return token != "" && subtle.ConstantTimeCompare(got[:], p.s.admin[:]) == 1
}

// newSession returns a session cookie value that expires at expiry: "<unix seconds>.<mac>".
func (p *approvalPage) newSession(expiry time.Time) string {
	exp := strconv.FormatInt(expiry.Unix(), 10)
	return exp + "." + p.mac(exp)
}

func (p *approvalPage) mac(exp string) string {
	m := hmac.New(sha256.New, p.sessionKey)
	m.Write([]byte("toolgate approval page session\x00" + exp))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (p *approvalPage) signedIn(r *http.Request) bool {
	_, ok := p.sessionExpiry(r)
	return ok
}

// sessionExpiry returns when the request's session ends; ok is false without a valid session.
func (p *approvalPage) sessionExpiry(r *http.Request) (expiry time.Time, ok bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return time.Time{}, false
	}
	exp, mac, found := strings.Cut(c.Value, ".")
	if !found || !hmac.Equal([]byte(mac), []byte(p.mac(exp))) {
		return time.Time{}, false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	expiry = time.Unix(unix, 0)
	return expiry, p.s.clock.Now().Before(expiry)
}
