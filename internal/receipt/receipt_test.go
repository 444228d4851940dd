package receipt

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func signed(t *testing.T, key Key, seq int64, prev string, args, result []byte) ([]byte, []byte) {
	t.Helper()
	p := &Predicate{
		ToolCall: ToolCall{Namespace: "payments", Name: "refund-1", UID: "u-1"},
		Tool:     Tool{ToolName: "refund"},
		Outcome:  Outcome{Phase: "Succeeded", Reason: "JobSucceeded", Ran: result != nil},
		Signer:   Signer{ManagerVersion: "test", KeyID: KeyID(key)},
		Chain:    Chain{Namespace: "payments", Sequence: seq, Previous: prev},
	}
	st, err := Statement(args, result, p)
	if err != nil {
		t.Fatal(err)
	}
	env, err := Sign(context.Background(), key, st)
	if err != nil {
		t.Fatal(err)
	}
	return st, env
}

func keyOf(t *testing.T, gen func() ([]byte, error)) (Key, Key) {
	t.Helper()
	priv, err := gen()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM, err := PublicPEM(k)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParseKey(pubPEM)
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

func TestReceiptVerifiesAndBindsItsSubjects(t *testing.T) {
	for name, gen := range map[string]func() ([]byte, error){"ecdsa-p256": GenerateECDSA, "ed25519": GenerateEd25519} {
		t.Run(name, func(t *testing.T) {
			k, pub := keyOf(t, gen)
			args := []byte(`{"b": 2, "a": 1.0}`)
			st, env := signed(t, k, 1, "", args, []byte("refunded"))
			v, err := Verify(context.Background(), env, pub)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if v.Digest != Digest(st) || v.KeyID != KeyID(k) {
				t.Fatalf("digest %s key %s, want %s %s", v.Digest, v.KeyID, Digest(st), KeyID(k))
			}
			canon, _ := CanonicalArguments(args)
			if string(canon) != `{"a":1,"b":2}` {
				t.Fatalf("canonical arguments %s", canon)
			}
			if !v.Matches(SubjectArguments, canon) || !v.Matches(SubjectResult, []byte("refunded")) {
				t.Fatalf("subjects %v do not match", v.Subjects)
			}
			if v.Matches(SubjectArguments, []byte(`{"a":1,"b":3}`)) || v.Matches(SubjectResult, []byte("refundeD")) {
				t.Fatal("a changed byte still matches")
			}
			if v.Predicate.Chain.Sequence != 1 || v.Predicate.ToolCall.UID != "u-1" {
				t.Fatalf("predicate %+v", v.Predicate)
			}
		})
	}
}

func TestVerifyRefuses(t *testing.T) {
	k, pub := keyOf(t, GenerateECDSA)
	_, other := keyOf(t, GenerateEd25519)
	_, env := signed(t, k, 1, "", []byte(`{}`), nil)
	tamper := func(f func(m map[string]any)) []byte {
		m := map[string]any{}
		_ = json.Unmarshal(env, &m)
		f(m)
		b, _ := json.Marshal(m)
		return b
	}
	payload := func(m map[string]any) {
		raw, _ := base64.StdEncoding.DecodeString(m["payload"].(string))
		m["payload"] = base64.StdEncoding.EncodeToString([]byte(strings.Replace(string(raw), `"refund-1"`, `"refund-2"`, 1)))
	}
	cases := map[string]struct {
		env  []byte
		keys []Key
		want error
	}{
		"another key":         {env, []Key{other}, ErrBadSignature},
		"no key":              {env, nil, ErrBadSignature},
		"payload changed":     {tamper(payload), []Key{pub}, ErrBadSignature},
		"payload type":        {tamper(func(m map[string]any) { m["payloadType"] = "text/plain" }), []Key{pub}, ErrNotReceipt},
		"not json":            {[]byte("receipt"), []Key{pub}, ErrNotReceipt},
		"oversized":           {make([]byte, MaxEnvelopeBytes+1), []Key{pub}, ErrNotReceipt},
		"signature truncated": {tamper(func(m map[string]any) { m["signatures"].([]any)[0].(map[string]any)["sig"] = "AAAA" }), []Key{pub}, ErrBadSignature},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Verify(context.Background(), c.env, c.keys...)
			if !errors.Is(err, c.want) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
		})
	}
	// Rotation: a receipt verifies against any of the keys given, the old one among them.
	if _, err := Verify(context.Background(), env, other, pub); err != nil {
		t.Fatalf("with the old key among the keys: %v", err)
	}
}

func TestParseKeyRefuses(t *testing.T) {
	cases := map[string]string{
		"not pem":   "key",
		"encrypted": "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
	}
	for name, in := range cases {
		if _, err := ParseKey([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestCheckChain(t *testing.T) {
	k, pub := keyOf(t, GenerateECDSA)
	var all []*Verified
	prev := ""
	for seq := int64(1); seq <= 4; seq++ {
		st, env := signed(t, k, seq, prev, []byte(`{}`), nil)
		v, err := Verify(context.Background(), env, pub)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, v)
		prev = Digest(st)
	}
	_, forked := signed(t, k, 3, all[1].Digest, []byte(`{"x":1}`), nil)
	fork, _ := Verify(context.Background(), forked, pub)
	_, wrongPrev := signed(t, k, 5, "sha256:00", []byte(`{}`), nil)
	wrong, _ := Verify(context.Background(), wrongPrev, pub)
	cases := map[string]struct {
		in   []*Verified
		from int64
		want []string
	}{
		"whole":               {all, 1, nil},
		"any order":           {[]*Verified{all[2], all[0], all[3], all[1]}, 1, nil},
		"gap":                 {[]*Verified{all[0], all[3]}, 1, []string{"receipts 2 to 3 are missing"}},
		"first missing":       {all[1:], 1, []string{"receipt 1 is missing"}},
		"from the lowest":     {all[1:], 0, nil},
		"fork":                {append([]*Verified{fork}, all...), 1, []string{"the chain forked"}},
		"broken link":         {append(append([]*Verified{}, all...), wrong), 1, []string{"names \"sha256:00\""}},
		"duplicate is no gap": {append([]*Verified{all[0]}, all...), 1, nil},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := CheckChain(c.in, c.from)
			if len(got) != len(c.want) {
				t.Fatalf("problems %v, want %d", got, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(got[i].Problem, w) {
					t.Fatalf("problem %q, want %q", got[i].Problem, w)
				}
			}
		})
	}
}
