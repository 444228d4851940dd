package lifecycle

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/provider"
)

// Record is a ToolCall's acceptance record: what the manager fixed when it accepted the call, kept in
// the ToolCall's annotations beside the finalizer, so that every later reconcile (a replay after a
// crash included) submits the same request, waits the same time and runs only the version of the
// Tool that was approved. Record is the only writer and reader of those annotations: Write puts a
// record on a ToolCall, ReadRecord takes one off it.
//
// Whoever may create a ToolCall may write annotations too: a record read back is only what the
// annotations say, and the acceptance check (controllers/toolcalls/acceptance.go) decides whether
// the manager could have written it.
type Record struct {
	// ExecutionTimeout is the Tool's executionTimeout at acceptance.
	ExecutionTimeout time.Duration
	// ApprovalTimeout is the timeout of the approval request.
	ApprovalTimeout time.Duration
	// Tool is the version of the Tool the call was accepted against; a zero UID records none.
	Tool ToolVersion
	// Provider is the provider object the call's requests go to; the zero value is the manager's flags.
	Provider ProviderRef
	// Instance is the provider instance the call's request lives in; "" until one is known.
	Instance string
	// Rule is the approval rule that approved the call at acceptance; RuleApproved says one did (a
	// rule's name may be empty).
	Rule         string
	RuleApproved bool

	// problems is what is wrong with each annotation that was read, by key.
	problems map[string]error
	// generationWritten says the Tool generation annotation is there, a number or not.
	generationWritten bool
}

// ToolVersion names one version of a Tool: its UID, generation and name.
type ToolVersion struct {
	UID        types.UID
	Generation int64
	Name       string
}

// VersionOf is the version tool is at.
func VersionOf(tool *tg.Tool) ToolVersion {
	return ToolVersion{UID: tool.UID, Generation: tool.Generation, Name: tool.Name}
}

// ProviderRef names a provider object by kind and name (an ApprovalProvider's namespace is the
// ToolCall's); the zero value names the manager's own provider (its flags).
type ProviderRef struct {
	Kind, Name string
}

// String is the ref as the record holds it: <kind>/<name>, "" for the manager's flags.
func (p ProviderRef) String() string {
	if p.Kind == "" {
		return ""
	}
	return p.Kind + "/" + p.Name
}

// ReadRecord reads the acceptance record on tc. It never fails: what an annotation that is missing
// or malformed would have held is left zero, and Problem says what is wrong with it.
func ReadRecord(tc *tg.ToolCall) Record {
	var r Record
	a := tc.Annotations
	r.ExecutionTimeout = r.duration(a, tg.AnnotationExecutionTimeout)
	r.ApprovalTimeout = r.duration(a, tg.AnnotationApprovalTimeout)
	uid, hasUID := a[tg.AnnotationToolUID]
	if !hasUID {
		r.problem(tg.AnnotationToolUID, missing(tg.AnnotationToolUID))
	}
	gen, hasGen := a[tg.AnnotationToolGeneration]
	r.generationWritten = hasGen
	g, err := strconv.ParseInt(gen, 10, 64)
	switch {
	case !hasGen:
		r.problem(tg.AnnotationToolGeneration, missing(tg.AnnotationToolGeneration))
	case err != nil:
		r.problem(tg.AnnotationToolGeneration, fmt.Errorf("annotation %s, written when the ToolCall was accepted, is not a number: %w", tg.AnnotationToolGeneration, err))
	}
	r.Tool = ToolVersion{UID: types.UID(uid), Generation: g, Name: a[tg.AnnotationToolName]}
	if v := a[tg.AnnotationProvider]; v != "" {
		kind, name, ok := strings.Cut(v, "/")
		if ok && name != "" && (kind == tg.KindApprovalProvider || kind == tg.KindClusterApprovalProvider) {
			r.Provider = ProviderRef{Kind: kind, Name: name}
		} else {
			r.problem(tg.AnnotationProvider, fmt.Errorf("annotation %s is %q, not ApprovalProvider/<name> or ClusterApprovalProvider/<name>", tg.AnnotationProvider, v))
		}
	}
	r.Instance = a[tg.AnnotationProviderInstance]
	r.Rule, r.RuleApproved = a[tg.AnnotationApprovalRule]
	return r
}

// duration reads one duration of the record, noting what is wrong with it.
func (r *Record) duration(a map[string]string, key string) time.Duration {
	v, ok := a[key]
	if !ok {
		r.problem(key, missing(key))
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.problem(key, fmt.Errorf("annotation %s is %q, not a duration", key, v))
	}
	return d
}

// problem notes what is wrong with annotation key.
func (r *Record) problem(key string, err error) {
	if r.problems == nil {
		r.problems = map[string]error{}
	}
	r.problems[key] = err
}

// missingAnnotation is the problem of an annotation of the record that is not there at all.
type missingAnnotation struct{ key string }

func (m *missingAnnotation) Error() string {
	return fmt.Sprintf("annotation %s is missing (the controller writes it together with the finalizer)", m.key)
}

func missing(key string) error { return &missingAnnotation{key: key} }

// Missing is the problem of the first of the annotations keys that is not there at all, in the order
// given; nil when all of them are there (a malformed one included).
func (r Record) Missing(keys ...string) error {
	for _, k := range keys {
		var m *missingAnnotation
		if errors.As(r.problems[k], &m) {
			return m
		}
	}
	return nil
}

// Problem is what is wrong with the first of the annotations keys (tg.Annotation*) that is missing or
// malformed, in the order given; nil when all of them were read.
func (r Record) Problem(keys ...string) error {
	for _, k := range keys {
		if err := r.problems[k]; err != nil {
			return err
		}
	}
	return nil
}

// RecordsToolVersion reports whether the record names the Tool version it was accepted against.
func (r Record) RecordsToolVersion() bool {
	return r.Problem(tg.AnnotationToolUID, tg.AnnotationToolGeneration) == nil
}

// Write puts the record on tc, as annotations (tc's other annotations are kept); r is then what
// ReadRecord reads from tc, so a reconcile that wrote it goes on with it. Only acceptance writes a
// whole record; a step that learns the instance (Instance) writes the record it read, whose check
// passed, with that one field set.
func (r *Record) Write(tc *tg.ToolCall) {
	r.problems, r.generationWritten = nil, true
	if tc.Annotations == nil {
		tc.Annotations = map[string]string{}
	}
	a := tc.Annotations
	a[tg.AnnotationExecutionTimeout] = r.ExecutionTimeout.String()
	a[tg.AnnotationApprovalTimeout] = r.ApprovalTimeout.String()
	a[tg.AnnotationToolUID] = string(r.Tool.UID)
	a[tg.AnnotationToolGeneration] = strconv.FormatInt(r.Tool.Generation, 10)
	a[tg.AnnotationToolName] = r.Tool.Name
	setOrDelete(a, tg.AnnotationProvider, r.Provider.String())
	setOrDelete(a, tg.AnnotationProviderInstance, r.Instance)
	if r.RuleApproved {
		a[tg.AnnotationApprovalRule] = r.Rule
	} else {
		delete(a, tg.AnnotationApprovalRule)
	}
}

func setOrDelete(a map[string]string, key, value string) {
	if value == "" {
		delete(a, key)
		return
	}
	a[key] = value
}

// Acceptance is what a ToolCall's acceptance record fixes for the rest of its life: its timing window
// and its approval request, so that every submission of it sends the same body.
type Acceptance struct {
	Window     Window
	Submission provider.Submission
}

// Acceptance is the window and approval request of tc as the record fixes them, with preview, the
// Tool's preview as the manager recorded and verified it (nil when the Tool has none, or before it
// is recorded: the request is first submitted after it is). It fails when the
// record lacks the execution or approval timeout, or holds a Tool generation that is not a number:
// the call was not accepted yet, or not by this controller. It checks no more than that: whether the
// record holds values acceptance could have written is the acceptance check's question.
func (r Record) Acceptance(tc *tg.ToolCall, preview *tg.PreviewRecord) (Acceptance, error) {
	if err := r.Problem(tg.AnnotationExecutionTimeout, tg.AnnotationApprovalTimeout); err != nil {
		return Acceptance{}, err
	}
	rc, err := requestContext(tc, r, preview)
	if err != nil {
		return Acceptance{}, err
	}
	return Acceptance{
		Window: NewWindow(tc, r.ExecutionTimeout),
		Submission: provider.Submission{
			IdempotencyKey: string(tc.UID),
			Tool:           tc.Spec.Tool,
			Arguments:      tc.Spec.Arguments.Raw,
			Timeout:        r.ApprovalTimeout,
			AgentReasoning: tc.Spec.Reason,
			Context:        rc,
		},
	}, nil
}
