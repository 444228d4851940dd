// Package receipt makes and checks Toolgate's signed receipts: one in-toto Statement (v1) per ended
// ToolCall, in a DSSE envelope signed with an ECDSA P-256 or Ed25519 key, under Toolgate's predicate
// type. The Statement's subjects are the SHA-256 digests of the call's arguments in RFC 8785 canonical
// form and, for a call that ran, of its result; its predicate says who asked, what was approved (or why
// nothing ran), what ran and who signed, and links the receipt to the one signed before it in the
// namespace. cosign verify-blob-attestation checks a receipt with the public key alone; Verify and
// CheckChain here are what `kubectl toolcall verify` runs.
//
// The formats are the libraries': in-toto's attestation Go module builds and validates the Statement,
// go-securesystemslib's dsse package signs and verifies the envelope, and gowebpki/jcs writes the
// canonical JSON. This package only fills them in.
package receipt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gowebpki/jcs"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/secure-systems-lab/go-securesystemslib/dsse"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// PredicateType is the predicate type of Toolgate's receipts (cosign's --type).
const PredicateType = "https://toolgate.dev/attestation/tool-execution/v1"

// PayloadType is the DSSE payload type of an in-toto Statement.
const PayloadType = "application/vnd.in-toto+json"

// Subject names: the canonical arguments and the result.
const (
	SubjectArguments = "arguments"
	SubjectResult    = "result"
)

// MaxEnvelopeBytes bounds a receipt's envelope as this package reads one back: a receipt it signs is a
// few KiB (the arguments and the result are in it only as digests).
const MaxEnvelopeBytes = 64 * 1024

// Outcomes of a call that did not run, the predicate's outcome.notRun.
const (
	NotRunDenied      = "denied"      // a human (or a Deny rule) denied it
	NotRunExpired     = "expired"     // the approval expired, at the provider or before the Job
	NotRunWithdrawn   = "withdrawn"   // the request was cancelled or withdrawn before a decision
	NotRunRejected    = "rejected"    // the call was refused before any human was asked
	NotRunUnavailable = "unavailable" // no valid decision arrived within the waiting limit
	NotRunNotStarted  = "notStarted"  // approved, but its Job could not be created
)

// Predicate is what a receipt says about one ToolCall. Times are RFC 3339 in UTC.
type Predicate struct {
	ToolCall  ToolCall   `json:"toolCall"`
	Tool      Tool       `json:"tool"`
	Outcome   Outcome    `json:"outcome"`
	Decision  *Decision  `json:"decision,omitempty"`
	Execution *Execution `json:"execution,omitempty"`
	Preview   *Preview   `json:"preview,omitempty"`
	Signer    Signer     `json:"signer"`
	Chain     Chain      `json:"chain"`
}

// ToolCall names the call and who asked.
type ToolCall struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	UID       string     `json:"uid"`
	Requester *Requester `json:"requester,omitempty"`
	CreatedAt string     `json:"createdAt"`
}

// Requester is spec.requester as admission stamped it.
type Requester struct {
	Username string   `json:"username"`
	UID      string   `json:"uid,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// Tool is the version of the Tool the call was accepted against.
type Tool struct {
	ToolName   string `json:"toolName"`
	Name       string `json:"name,omitempty"`
	UID        string `json:"uid,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// SpecDigest is the SHA-256 of the Tool's spec in canonical JSON at that generation; empty when
	// the Tool was changed or deleted before the receipt was signed.
	SpecDigest string `json:"specDigest,omitempty"`
}

// Outcome is how the call ended.
type Outcome struct {
	Phase   string `json:"phase"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
	// Ran says whether the tool's Job was created; NotRun says why not when it was not.
	Ran    bool   `json:"ran"`
	NotRun string `json:"notRun,omitempty"`
}

// Decision is the decision on the call: a human's at the provider, or a rule of the Tool.
type Decision struct {
	// By is "human" (the provider's answer) or "rule".
	By             string    `json:"by"`
	Rule           string    `json:"rule,omitempty"`
	Status         string    `json:"status"`
	Provider       *Provider `json:"provider,omitempty"`
	RequestID      string    `json:"requestID,omitempty"`
	IdempotencyKey string    `json:"idempotencyKey,omitempty"`
	DecidedAt      string    `json:"decidedAt,omitempty"`
	ExpiresAt      string    `json:"expiresAt,omitempty"`
	// ResponseDigest is the SHA-256 of the provider's response that carried the decision, byte for byte
	// as received.
	ResponseDigest string `json:"responseDigest,omitempty"`
}

// Provider is the approvals provider the call's request went to.
type Provider struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Preview is what the Tool's preview said before anyone was asked (the approver saw it, and the
// execution Job received its digest): its digest, or why it failed, and the Job and image that gave it.
type Preview struct {
	JobName string `json:"jobName"`
	Format  string `json:"format,omitempty"`
	Digest  string `json:"digest,omitempty"`
	Image   string `json:"image,omitempty"`
	ImageID string `json:"imageID,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Execution is what ran.
type Execution struct {
	JobName         string      `json:"jobName"`
	JobUID          string      `json:"jobUID"`
	PodName         string      `json:"podName,omitempty"`
	PodUID          string      `json:"podUID,omitempty"`
	NodeName        string      `json:"nodeName,omitempty"`
	Containers      []Container `json:"containers,omitempty"`
	ResultTruncated bool        `json:"resultTruncated"`
}

// Container is one container of the tool's Pod as the kubelet reported it.
type Container struct {
	Name    string `json:"name"`
	Image   string `json:"image"`
	ImageID string `json:"imageID,omitempty"`
	// ImageDigest is the sha256:… digest in ImageID, when it names one.
	ImageDigest string `json:"imageDigest,omitempty"`
	StartedAt   string `json:"startedAt,omitempty"`
	FinishedAt  string `json:"finishedAt,omitempty"`
	ExitCode    *int32 `json:"exitCode,omitempty"`
}

// Signer is the manager that signed.
type Signer struct {
	ManagerVersion string `json:"managerVersion"`
	KeyID          string `json:"keyID"`
	SignedAt       string `json:"signedAt"`
}

// Chain links a receipt to the one the manager signed before it for the same namespace.
type Chain struct {
	Namespace string `json:"namespace"`
	// Sequence counts the namespace's receipts from 1.
	Sequence int64 `json:"sequence"`
	// Previous is the digest (Digest) of receipt Sequence-1; empty for the first.
	Previous string `json:"previous,omitempty"`
}

// Time writes t as the predicate's times are written; the zero time is "".
func Time(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// Sha256 is the hex SHA-256 of b.
func Sha256(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// CanonicalArguments is the arguments document in RFC 8785 canonical form: the file cosign checks a
// receipt against.
func CanonicalArguments(raw []byte) ([]byte, error) {
	c, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("writing the arguments in canonical form: %w", err)
	}
	return c, nil
}

// Statement builds the in-toto Statement of a receipt, in canonical JSON (so the same facts always
// give the same bytes). result is nil for a call that did not run.
func Statement(arguments, result []byte, p *Predicate) ([]byte, error) {
	args, err := CanonicalArguments(arguments)
	if err != nil {
		return nil, err
	}
	subjects := []*intoto.ResourceDescriptor{{Name: SubjectArguments, Digest: map[string]string{"sha256": Sha256(args)}}}
	if result != nil {
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: SubjectResult, Digest: map[string]string{"sha256": Sha256(result)}})
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	pred := &structpb.Struct{}
	if err := protojson.Unmarshal(raw, pred); err != nil {
		return nil, fmt.Errorf("encoding the predicate: %w", err)
	}
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects, PredicateType: PredicateType, Predicate: pred}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("the receipt's statement is invalid: %w", err)
	}
	out, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(out)
}

// Digest is the digest a receipt is known by, and that the next receipt's chain.previous names: the
// SHA-256 of its Statement (the envelope's payload), "sha256:<hex>". Signatures are not part of it.
func Digest(statement []byte) string { return "sha256:" + Sha256(statement) }

// Sign wraps statement in a DSSE envelope signed by s, as JSON.
func Sign(ctx context.Context, s dsse.Signer, statement []byte) ([]byte, error) {
	es, err := dsse.NewEnvelopeSigner(s)
	if err != nil {
		return nil, err
	}
	env, err := es.SignPayload(ctx, PayloadType, statement)
	if err != nil {
		return nil, fmt.Errorf("signing the receipt: %w", err)
	}
	return json.Marshal(env)
}

// Verified is a receipt whose signature one of the keys accepted.
type Verified struct {
	// KeyID is the id of the key that verified it.
	KeyID string
	// Statement is the envelope's payload; Digest its digest.
	Statement []byte
	Digest    string
	// Subjects are the subjects' SHA-256 digests by name.
	Subjects  map[string]string
	Predicate Predicate
}

// Errors Verify returns.
var (
	ErrNotReceipt   = errors.New("not a Toolgate receipt")
	ErrBadSignature = errors.New("no key verifies the receipt's signature")
)

// Verify checks that envelope is a DSSE envelope over an in-toto Statement of PredicateType, signed
// by one of keys, and decodes it.
func Verify(ctx context.Context, envelope []byte, keys ...Key) (*Verified, error) {
	if len(envelope) > MaxEnvelopeBytes {
		return nil, fmt.Errorf("%w: the envelope is %d bytes, more than %d", ErrNotReceipt, len(envelope), MaxEnvelopeBytes)
	}
	env := &dsse.Envelope{}
	if err := json.Unmarshal(envelope, env); err != nil {
		return nil, fmt.Errorf("%w: the envelope is not DSSE JSON: %v", ErrNotReceipt, err)
	}
	if env.PayloadType != PayloadType {
		return nil, fmt.Errorf("%w: payload type %q, not %q", ErrNotReceipt, env.PayloadType, PayloadType)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no public key was given", ErrBadSignature)
	}
	var accepted []dsse.AcceptedKey
	var payload []byte
	var lastErr error
	// Each key is tried alone: one that does not verify is not an error while another does.
	for _, k := range keys {
		ev, err := dsse.NewEnvelopeVerifier(k)
		if err != nil {
			return nil, err
		}
		accepted, payload, lastErr = ev.VerifyAndDecode(ctx, env)
		if lastErr == nil && len(accepted) > 0 {
			break
		}
	}
	if lastErr != nil || len(accepted) == 0 {
		return nil, fmt.Errorf("%w: %v", ErrBadSignature, lastErr)
	}
	st := &intoto.Statement{}
	if err := protojson.Unmarshal(payload, st); err != nil {
		return nil, fmt.Errorf("%w: the payload is not an in-toto Statement: %v", ErrNotReceipt, err)
	}
	if err := st.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotReceipt, err)
	}
	if st.GetPredicateType() != PredicateType {
		return nil, fmt.Errorf("%w: predicate type %q, not %q", ErrNotReceipt, st.GetPredicateType(), PredicateType)
	}
	v := &Verified{KeyID: accepted[0].KeyID, Statement: payload, Digest: Digest(payload), Subjects: map[string]string{}}
	for _, s := range st.GetSubject() {
		v.Subjects[s.GetName()] = s.GetDigest()["sha256"]
	}
	raw, err := protojson.Marshal(st.GetPredicate())
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(raw, &v.Predicate); err != nil {
		return nil, fmt.Errorf("%w: the predicate does not decode: %v", ErrNotReceipt, err)
	}
	return v, nil
}

// Matches reports whether the receipt's subject name is the digest of content (the canonical
// arguments, or the result as status.result holds it).
func (v *Verified) Matches(name string, content []byte) bool {
	d, ok := v.Subjects[name]
	return ok && d == Sha256(content)
}

// SpecDigest is the digest a receipt gives a Tool's spec: the SHA-256 of its JSON in RFC 8785
// canonical form, "sha256:<hex>".
func SpecDigest(spec any) (string, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return "", err
	}
	c, err := jcs.Transform(raw)
	if err != nil {
		return "", err
	}
	return "sha256:" + Sha256(c), nil
}

// ImageDigest is the sha256:… digest a container status's imageID names (repo@sha256:…, or the
// digest alone), else "".
func ImageDigest(imageID string) string {
	i := strings.LastIndex(imageID, "sha256:")
	if i < 0 || len(imageID)-i != len("sha256:")+64 {
		return ""
	}
	return imageID[i:]
}
