package aapwebhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"toolgate.dev/toolgate/internal/aapwebhook"
)

const (
	secret      = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	otherSecret = "whsec_HxwdHhobGBkWFxQVEhMQEQ4PDA0KCwgJBgcEBQIDAAE="
	eventID     = "f4b96ac4-404d-4f6a-9a03-a0565edc4922"
	instanceID  = "b29a43a7-1949-4b9f-9d61-b7ae66f85d31"
	requestID   = "7ab8c8ec-7b2d-4fd6-9b52-752f9515eb71"
	regID       = "8246931c-4ce0-4c15-a94a-e9c078ad06e2"
)

var now = time.Date(2026, 9, 16, 12, 2, 1, 0, time.UTC)

const resolved = `{"id":"` + eventID + `","type":"request.resolved","instance_id":"` + instanceID + `","request_id":"` + requestID + `","created_at":"2026-09-16T12:02:00Z"}`

// signed signs body as message id at ts with key, as a provider does, with the official library.
func signed(t testing.TB, key, id string, ts time.Time, body string) http.Header {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(key)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, ts, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set("webhook-id", id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts.Unix(), 10))
	h.Set("webhook-signature", sig)
	return h
}

func TestPeek(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"notification", resolved, true},
		{"verification", `{"id":"c9bb5281-f9a5-4660-b27e-0b1cbbad81b6","type":"webhook.verification","registration_id":"` + regID + `","instance_id":"` + instanceID + `","created_at":"2026-09-16T11:59:00Z","challenge":"2edc34d7"}`, true},
		{"unknown fields are ignored", strings.Replace(resolved, `{"id"`, `{"extra":1,"id"`, 1), true},
		{"verification without a challenge", `{"id":"c9bb5281-f9a5-4660-b27e-0b1cbbad81b6","type":"webhook.verification","registration_id":"` + regID + `","instance_id":"` + instanceID + `","created_at":"2026-09-16T11:59:00Z"}`, false},
		{"unknown type", strings.Replace(resolved, "request.resolved", "request.created", 1), false},
		{"request id not a UUID", strings.Replace(resolved, requestID, "42", 1), false},
		{"no instance id", strings.Replace(resolved, `"instance_id":"`+instanceID+`",`, "", 1), false},
		{"no created_at", strings.Replace(resolved, `,"created_at":"2026-09-16T12:02:00Z"`, "", 1), false},
		{"two values", resolved + resolved, false},
		{"not JSON", `id=1`, false},
		{"empty", ``, false},
	} {
		m, err := aapwebhook.Peek([]byte(tc.body))
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && !errors.Is(err, aapwebhook.ErrMalformed) {
			t.Errorf("%s: got %v (%+v), want ErrMalformed", tc.name, err, m)
		}
	}
}

func TestVerify(t *testing.T) {
	m, err := aapwebhook.Peek([]byte(resolved))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		body string
		want error
	}{
		{"signed now", signed(t, secret, eventID, now, resolved), resolved, nil},
		{"signed 5 minutes ago", signed(t, secret, eventID, now.Add(-aapwebhook.Tolerance), resolved), resolved, nil},
		{"signed 5 minutes ahead", signed(t, secret, eventID, now.Add(aapwebhook.Tolerance), resolved), resolved, nil},
		{"one of several signatures", func() http.Header {
			h := signed(t, secret, eventID, now, resolved)
			h.Set("webhook-signature", "v1,bm9wZQ== "+h.Get("webhook-signature"))
			return h
		}(), resolved, nil},
		{"another secret", signed(t, otherSecret, eventID, now, resolved), resolved, aapwebhook.ErrUnauthenticated},
		{"body changed after signing", signed(t, secret, eventID, now, resolved), strings.Replace(resolved, "12:02:00", "12:03:00", 1), aapwebhook.ErrUnauthenticated},
		{"too old", signed(t, secret, eventID, now.Add(-aapwebhook.Tolerance-time.Second), resolved), resolved, aapwebhook.ErrUnauthenticated},
		{"too new", signed(t, secret, eventID, now.Add(aapwebhook.Tolerance+time.Second), resolved), resolved, aapwebhook.ErrUnauthenticated},
		{"no signature", func() http.Header {
			h := signed(t, secret, eventID, now, resolved)
			h.Del("webhook-signature")
			return h
		}(), resolved, aapwebhook.ErrUnauthenticated},
		{"webhook-id is not the body's id", signed(t, secret, "c9bb5281-f9a5-4660-b27e-0b1cbbad81b6", now, resolved), resolved, aapwebhook.ErrMalformed},
	} {
		err := aapwebhook.Verify(secret, m, []byte(tc.body), tc.h, now)
		if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := aapwebhook.Verify("not a secret", m, []byte(resolved), signed(t, secret, eventID, now, resolved), now); err == nil || errors.Is(err, aapwebhook.ErrUnauthenticated) {
		t.Errorf("an unusable secret: got %v, want a configuration error", err)
	}
}

func TestNewSecret(t *testing.T) {
	s, err := aapwebhook.NewSecret(func(b []byte) (int, error) {
		for i := range b {
			b[i] = byte(i)
		}
		return len(b), nil
	})
	if err != nil || s != secret {
		t.Fatalf("NewSecret = %q, %v; want %q", s, err, secret)
	}
}

// FuzzVerify: whatever the body and headers, Verify accepts a message only when its signature is
// the one the secret makes for that id, timestamp and body, within the tolerance, and the body's id
// is the webhook-id; it never panics.
func FuzzVerify(f *testing.F) {
	good := signed(f, secret, eventID, now, resolved)
	f.Add(resolved, eventID, good.Get("webhook-timestamp"), good.Get("webhook-signature"))
	f.Add(resolved, eventID, "0", good.Get("webhook-signature"))
	f.Add(`{"id":"x"}`, "x", "1", "v1,")
	f.Fuzz(func(t *testing.T, body, id, ts, sig string) {
		h := http.Header{}
		h.Set("webhook-id", id)
		h.Set("webhook-timestamp", ts)
		h.Set("webhook-signature", sig)
		m, err := aapwebhook.Peek([]byte(body))
		if err != nil {
			return
		}
		if aapwebhook.Verify(secret, m, []byte(body), h, now) != nil {
			return
		}
		sec, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil {
			t.Fatalf("accepted a timestamp that is not a number: %q", ts)
		}
		at := time.Unix(sec, 0)
		if d := now.Sub(at); d > aapwebhook.Tolerance || d < -aapwebhook.Tolerance {
			t.Fatalf("accepted a timestamp %s from now", d)
		}
		want := signed(t, secret, id, at, body).Get("webhook-signature")
		if !strings.Contains(" "+sig+" ", " "+want+" ") {
			t.Fatalf("accepted signature %q, which is not %q", sig, want)
		}
		if m.ID != id {
			t.Fatalf("accepted body id %q with webhook-id %q", m.ID, id)
		}
	})
}
