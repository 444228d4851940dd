package reference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf16"

	"toolgate.dev/toolgate/internal/provider"
)

// handlePage renders the page for a signed-in browser, and the sign-in form for any other. A
// credential in the address (?token=) is refused, never used: it would stay in the browser's history,
// in proxy and server logs and in Referer headers.
func (p *approvalPage) handlePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Has("token") {
		signInPage(w, http.StatusUnauthorized, "A credential in the address is refused: it stays in the browser's history and in logs. "+
			"Sign in with the form instead.")
		return
	}
	if !p.signedIn(r) {
		signInPage(w, http.StatusOK, signInHint)
		return
	}
	snap, _, err := p.snapshot(p.approver(r))
	if err != nil {
		write(w, p.s.failure(err, ""))
		return
	}
	var buf bytes.Buffer
	err = p.page.Execute(&buf, pageView{
		Approver:       p.approver(r),
		Snapshot:       snap,
		DefaultMinutes: p.defaultMinutes(),
		MaxMinutes:     p.maxMinutes(),
	})
	if err != nil {
		write(w, p.s.failure(fmt.Errorf("rendering the approval page: %w", err), ""))
		return
	}
	pageHeaders(w, "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

// pageView is what page.html renders.
type pageView struct {
	Approver       string // who is signed in; their decisions record it
	Snapshot       snapshot
	DefaultMinutes int
	MaxMinutes     int
}

// rowView is what the "request" template renders: one pending request and its controls.
type rowView struct {
	Item           pageItem
	Left           string // time left until the deadline, by the server's clock
	DefaultMinutes int
	MaxMinutes     int
}

// Row returns the view of a pending request.
func (v pageView) Row(item pageItem) rowView {
	row := rowView{Item: item, DefaultMinutes: v.DefaultMinutes, MaxMinutes: v.MaxMinutes}
	if item.DeadlineAt != nil {
		row.Left = formatLeft(item.DeadlineAt.Sub(v.Snapshot.Now))
	}
	return row
}

// Blank is the empty item the page's script fills in for requests that arrive later.
func (pageView) Blank() pageItem { return pageItem{} }

// pageHeaders sets the headers of every page response: no caching, no framing, scripts and styles
// from the page's own origin only.
func pageHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "+
		"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
}

// signInHint is what the sign-in form says when nobody is signed in.
const signInHint = "Sign in with the admin credential or your approver credential."

// signInPage answers with the sign-in form, which posts the credential to /ui/sign-in in the body:
// 200 for a browser not signed in yet, 401 for a refused credential.
func signInPage(w http.ResponseWriter, status int, message string) {
	pageHeaders(w, "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_ = signIn.Execute(w, message)
}

var signIn = template.Must(template.New("sign-in").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in: Toolgate approvals</title></head>
<body><h1>Toolgate approvals</h1><p id="sign-in">{{.}}</p>
<form method="post" action="/ui/sign-in"><label>Credential <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Sign in</button></form></body></html>
`))

// staticFiles are the files under ui/ served as they are, with their content types.
var staticFiles = map[string]string{
	"app.js":    "text/javascript; charset=utf-8",
	"style.css": "text/css; charset=utf-8",
}

func (p *approvalPage) handleStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	contentType, known := staticFiles[name]
	data, err := fs.ReadFile(p.static, name)
	if !known || err != nil {
		write(w, fail(provider.CodeNotFound, "no such file: "+quote(name)))
		return
	}
	pageHeaders(w, contentType)
	_, _ = w.Write(data)
}

func (p *approvalPage) defaultMinutes() int {
	return int((p.s.opts.DefaultApprovalValidity + time.Minute - 1) / time.Minute)
}

func (p *approvalPage) maxMinutes() int {
	return max(int(maxValidity/time.Minute), p.defaultMinutes())
}

// formatLeft renders the time left until a deadline: "1h 05m", "4m 09s", "42s", or "deadline passed".
func formatLeft(d time.Duration) string {
	if d <= 0 {
		return "deadline passed"
	}
	secs := int64(d / time.Second)
	h, m, s := secs/3600, secs/60%60, secs%60
	switch {
	case h > 0:
		return fmt.Sprintf("%dh %02dm", h, m)
	case m > 0:
		return fmt.Sprintf("%dm %02ds", m, s)
	}
	return fmt.Sprintf("%ds", s)
}

// formatTimestamp renders a time.Time or *time.Time in RFC 3339, UTC; nil renders empty.
func formatTimestamp(v any) string {
	switch t := v.(type) {
	case time.Time:
		return t.UTC().Format(time.RFC3339)
	case *time.Time:
		if t != nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return ""
}

// prettyJSON renders a JSON document indented by two spaces, keeping its keys in their order and its
// numbers as written, so that the approver reads what was submitted. Strings show their
// characters as they are, except those a reader could not see or tell apart: control and format
// characters (such as bidirectional overrides, zero-width spaces and tag characters), separators other
// than the space, and unassigned or private-use code points are written as \u escapes. HTML-significant
// characters are not escaped here: the page always inserts the result as text.
func prettyJSON(doc []byte) string {
	out, _ := prettyJSONUpTo(doc, math.MaxInt)
	return out
}

// prettyJSONUpTo renders doc as prettyJSON does, at most limit bytes (cut at a character boundary),
// and says whether it cut it. It stops rendering at the limit, so that deep nesting, whose
// indentation grows with the square of the depth, costs no more than the limit.
func prettyJSONUpTo(doc []byte, limit int) (string, bool) {
	type container struct {
		object bool
		tokens int // keys and values so far
	}
	var (
		b     strings.Builder
		stack []container
	)
	newline := func() {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", len(stack)))
	}
	beforeValue := func() {
		if len(stack) == 0 {
			return
		}
		top := &stack[len(stack)-1]
		if top.object && top.tokens%2 == 1 {
			b.WriteString(": ")
		} else {
			if top.tokens > 0 {
				b.WriteByte(',')
			}
			newline()
		}
		top.tokens++
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	for {
		if b.Len() > limit {
			return bounded(b.String(), limit)
		}
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return b.String(), false
		}
		if err != nil {
			return bounded(string(doc), limit) // not reached for stored arguments, which were validated
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				beforeValue()
				stack = append(stack, container{object: t == '{'})
			case '}', ']':
				closed := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				if closed.tokens > 0 {
					newline()
				}
			}
			b.WriteRune(rune(t))
		case string:
			beforeValue()
			writeJSONString(&b, t)
		case json.Number:
			beforeValue()
			b.WriteString(t.String())
		case bool:
			beforeValue()
			b.WriteString(strconv.FormatBool(t))
		case nil:
			beforeValue()
			b.WriteString("null")
		}
	}
}

// visibleText is s with the characters a reader could not see or tell apart written as escapes, as
// writeJSONString writes them, without the quotes.
func visibleText(s string) string {
	if s == "" {
		return ""
	}
	var b strings.Builder
	writeJSONString(&b, s)
	out := b.String()
	return out[1 : len(out)-1]
}

// visibleProse is s as the page shows prose (the agent's reasoning): line breaks and tabs stay as they
// are, and every other character a reader could not see or tell apart is written as a \u escape.
func visibleProse(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == '\n' || r == '\t' || unicode.IsPrint(r) {
			b.WriteRune(r)
		} else {
			writeEscape(&b, r)
		}
	}
	return b.String()
}

// writeJSONString writes s as a JSON string, escaping what a reader could not see (see prettyJSON).
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			writeEscape(b, r)
		}
	}
	b.WriteByte('"')
}

// writeEscape writes r as a \u escape (a surrogate pair beyond the Basic Multilingual Plane).
func writeEscape(b *strings.Builder, r rune) {
	if r > 0xFFFF {
		r1, r2 := utf16.EncodeRune(r)
		fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
		return
	}
	fmt.Fprintf(b, `\u%04x`, r)
}
