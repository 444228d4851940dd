package lifecycle

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	tg "toolgate.dev/toolgate/api/v1alpha1"
)

// Outcome names one row of the outcome table: a phase the controller records, its reason, and how its
// status message is written. Every status a step records is an Outcome's (Outcome.Status), so the
// table is the whole list of what a ToolCall's status can say; docs/troubleshooting.md describes each
// (phase, reason) pair of it, and test/docstest checks that it does.
type Outcome int

// Row is an Outcome's data. The status message is Format filled in with the step's arguments, followed
// by Closing.
type Row struct {
	Phase  tg.ToolCallPhase
	Reason string
	// Format is the message as a fmt format.
	Format string
	// Closing ends every message of the row, after what the step filled in.
	Closing string
}

// DidNotRun is the Closing of outcomes that say the tool was not started.
const DidNotRun = " The call did not run."

// imageWaitClosing is the Closing of a call whose container waits for an image the node cannot get.
const imageWaitClosing = " The call was approved; the tool has not run, and the Job's deadline ends the call unless the image becomes available."

// The outcomes, grouped by phase. The comment of each says what the step passes to Status.
const (
	// SubmitRetrying: the submission failed and is retried (the cause).
	SubmitRetrying Outcome = iota
	// PolicyApproved: an Approve rule approved the call; the Job is created next (the rule, the Tool).
	PolicyApproved
	// ProviderWaiting: the call's approvals provider is missing or not Ready (what is wrong).
	ProviderWaiting
	// PreviewRunning: the Tool's preview Job runs (the Job).
	PreviewRunning

	// AwaitingHuman: the provider holds the pending request.
	AwaitingHuman

	// JobRunning: the Job exists (the Job's name).
	JobRunning
	// ImageWaiting: the Job's container waits for an image the node cannot get (the Job, the
	// container, why the image cannot be had, the kubelet's reason).
	ImageWaiting

	// JobSucceeded: the Job completed.
	JobSucceeded

	// JobFailed: the Job failed and the Job controller said why (its reason: message).
	JobFailed
	// JobFailedUnexplained: the Job failed without a reason on its condition.
	JobFailedUnexplained
	// MCPCallLost: the Job of an MCPServer's Tool failed after mcp-call may have sent the call (a lost
	// connection, a kill, an eviction, a lost node): the tool may have run.
	MCPCallLost
	// ImageNeverArrived: the Job failed while its container waited for its image (the Job's failure,
	// ImageWaiting's Body of the Running message).
	ImageNeverArrived
	// JobDeleted: the Job was deleted before it finished (the Job's name).
	JobDeleted
	// JobRefused: the apiserver refused the Job as invalid (its reason).
	JobRefused
	// ForeignJobBeforeStart: approved, but a Job the manager did not create holds the call's Job name
	// (the Job's name).
	ForeignJobBeforeStart
	// ForeignJobReplaced: the call's Job was replaced by one the manager did not create (its name).
	ForeignJobReplaced
	// ForeignPodCounted: the finished Job counted a Pod not made from its template (the Job, the Pod).
	ForeignPodCounted
	// ApprovedToolMissing: approved, but no single Tool has the toolName any more (the message of the
	// UnknownTool or AmbiguousTool status).
	ApprovedToolMissing
	// ApprovedToolDeleted: approved, but the Tool was deleted before its live read (the Tool).
	ApprovedToolDeleted
	// ApprovedToolChanged: approved, but the Tool is no longer the accepted version (how it differs).
	ApprovedToolChanged
	// ApprovedProviderChanged: approved by the provider the call was accepted with, which no longer
	// serves the Tool's calls (the Tool, that provider, the one that serves them now).
	ApprovedProviderChanged

	// HumanDenied: a human denied the call without a note.
	HumanDenied
	// HumanDeniedWithNote: a human denied the call (their note).
	HumanDeniedWithNote

	// ApprovalExpired: the approval expired before the Job could be created (expires_at, RFC 3339).
	ApprovalExpired

	// ProviderExpired: the provider's deadline passed without a decision.
	ProviderExpired
	// ProviderUnreachable: the provider could not be reached before the waiting limit (the cause).
	ProviderUnreachable
	// NoDecision: nothing decided before the waiting limit, and the request could not be withdrawn.
	NoDecision
	// NoDecisionWithdrawn: nothing decided before the waiting limit; the request was withdrawn.
	NoDecisionWithdrawn
	// ApprovedTooLate: the approval left no room to run the tool within the waiting limit.
	ApprovedTooLate
	// UntrustedSubmitAnswer: the answer to the submission could not be trusted (the defect).
	UntrustedSubmitAnswer
	// UntrustedAnswer: a later answer could not be trusted (the defect).
	UntrustedAnswer
	// PreviewNotVerified: the preview's record or Job is not the manager's (what is wrong).
	PreviewNotVerified
	// DecisionNotApproval: the run gate found a recorded decision that is not an approval.
	DecisionNotApproval
	// IdempotencyConflict: the provider holds another request under the call's key.
	IdempotencyConflict
	// RequestLost: the provider no longer knows the request.
	RequestLost
	// ArgumentsChanged: the approval covers other arguments than spec.arguments.
	ArgumentsChanged

	// ProviderCancelled: the request was cancelled at the provider.
	ProviderCancelled
	// ToolChangedWithdrawn: the Tool changed while the call awaited a decision, and the request was
	// withdrawn (how the Tool changed).
	ToolChangedWithdrawn
	// ToolChangedNotWithdrawable: the Tool changed while the call awaited a decision, and the provider
	// cannot withdraw the request (how the Tool changed).
	ToolChangedNotWithdrawable

	// UnknownTool: no Tool has spec.tool's toolName (spec.tool, the namespace, spec.tool).
	UnknownTool
	// AmbiguousTool: several Tools have the toolName (spec.tool, their names, the namespace).
	AmbiguousTool
	// ArgumentsTooLarge: spec.arguments is over the limit (its size, the limit).
	ArgumentsTooLarge
	// ArgumentsNotObject: spec.arguments is not a JSON object.
	ArgumentsNotObject
	// ArgumentsTooDeep: spec.arguments nests too deeply (its depth, the limit).
	ArgumentsTooDeep
	// ArgumentsInexactNumber: spec.arguments holds a number its canonical form changes (its JSON
	// pointer, the number).
	ArgumentsInexactNumber
	// ArgumentsNotJSON: spec.arguments does not parse (the parser's error).
	ArgumentsNotJSON
	// ArgumentsDoNotMatchSchema: spec.arguments fails the Tool's argumentsSchema (the Tool, where).
	ArgumentsDoNotMatchSchema
	// SchemaInvalid: the Tool's argumentsSchema does not compile (the Tool, the compiler's error).
	SchemaInvalid
	// JobTemplateInvalid: the Tool's jobTemplate fails the Job dry run (the Tool, the apiserver's
	// reason).
	JobTemplateInvalid
	// PreviewTemplateInvalid: the Tool's preview template fails the Job dry run or does not decode (the
	// Tool, why).
	PreviewTemplateInvalid
	// PreviewFailed: the preview failed and the Tool's onFailure is Deny (the Tool, what went wrong).
	PreviewFailed
	// RulesInvalid: the Tool's approval rules do not compile (the Tool, the compiler's message).
	RulesInvalid
	// PolicyDenied: a Deny rule matched (the rule, the Tool).
	PolicyDenied
	// TimeoutDoesNotFit: spec.timeout does not fit the waiting limit (the numbers, from CheckFits).
	TimeoutDoesNotFit
	// RecordInvalid: the acceptance record is not one the controller wrote (what is wrong with it).
	RecordInvalid
	// ToolChangedBeforeSubmission: the Tool changed before the request was submitted (again) (how).
	ToolChangedBeforeSubmission
	// ProviderRefused: the provider refused the request with invalid_request (its error).
	ProviderRefused
	// ClusterProviderOff: the Tool names a ClusterApprovalProvider, which the manager does not use
	// (the Tool, the provider's name, the namespace).
	ClusterProviderOff

	outcomes // the number of outcomes
)

var table = [outcomes]Row{
	SubmitRetrying:  {tg.PhasePending, tg.ReasonSubmitFailed, "The approval request could not be submitted yet (%s); retrying until the waiting limit.", ""},
	ProviderWaiting: {tg.PhasePending, tg.ReasonProviderNotReady, "The approval request cannot be submitted yet: %s. It is submitted once that is fixed, within the waiting limit.", ""},
	PreviewRunning:  {tg.PhasePending, tg.ReasonPreviewRunning, "The Tool's preview (Job %s) runs; the approval request is submitted once it has said what the call would do.", ""},
	PolicyApproved:  {tg.PhasePending, tg.ReasonPolicyApproved, "Rule %s of Tool %s approved the call (spec.approval); no human was asked. Starting the Job.", ""},

	AwaitingHuman: {tg.PhaseAwaitingApproval, tg.ReasonAwaitingApproval, "Waiting for a human to approve or deny the call.", ""},

	JobRunning:   {tg.PhaseRunning, tg.ReasonJobCreated, "Approved; the tool is running as Job %s.", ""},
	ImageWaiting: {tg.PhaseRunning, tg.ReasonImageUnavailable, "Job %s's container %s has not started: %s (%s).", imageWaitClosing},

	JobSucceeded: {tg.PhaseSucceeded, tg.ReasonJobSucceeded, "The tool ran and succeeded; status.result holds its output.", ""},

	JobFailed:            {tg.PhaseFailed, tg.ReasonJobFailed, "The tool's Job failed (%s); status.result holds the tool's last message, if it wrote one.", ""},
	JobFailedUnexplained: {tg.PhaseFailed, tg.ReasonJobFailed, "The tool's Job failed; status.result holds the tool's last message, if it wrote one.", ""},
	MCPCallLost: {tg.PhaseFailed, tg.ReasonToolMayHaveRun, "The call may have reached the MCP server and mcp-call did not say how it ended (the connection was lost " +
		"before the answer, or its container was killed, evicted or lost with its node): the tool may have run. It was not called again; check the tool's own records " +
		"before calling it again. status.result holds mcp-call's message, if it wrote one.", ""},
	ImageNeverArrived: {tg.PhaseFailed, tg.ReasonImageUnavailable, "The tool's Job failed (%s) before its container started, so the tool did not run, as last reported by the kubelet. %s", ""},
	JobDeleted:        {tg.PhaseFailed, tg.ReasonJobMissing, "Job %s was deleted before it finished; its outcome is unknown.", ""},
	JobRefused:        {tg.PhaseFailed, tg.ReasonJobRefused, "The call was approved but the Job was refused by the cluster (%v).", DidNotRun},
	ForeignJobBeforeStart: {tg.PhaseFailed, tg.ReasonForeignJob, "The call was approved, but Job %s, the name its run is recorded under, was created by someone " +
		"other than Toolgate (it has no valid " + tg.AnnotationExecutionProof + "), so it is not this call's run and the tool was not started. " +
		"Check who may create Jobs in this namespace, delete that Job and create the ToolCall again.", DidNotRun},
	ForeignJobReplaced: {tg.PhaseFailed, tg.ReasonForeignJob, "Job %s, which Toolgate created to run the call, was replaced by a Job Toolgate did not create: " +
		"the tool may have run, and its outcome is unknown. Check who may delete and create Jobs in this namespace.", ""},
	ForeignPodCounted: {tg.PhaseFailed, tg.ReasonForeignPod, "Job %s finished counting Pod %s, which was not made from the Job's template (someone else created it): " +
		"the Job's outcome is not the tool's, so the tool may have run and its outcome is unknown. Check who may create Pods in this namespace.", ""},
	ApprovedToolMissing: {tg.PhaseFailed, tg.ReasonInvalidTool, "The call was approved but could not start: %s", DidNotRun},
	ApprovedToolDeleted: {tg.PhaseFailed, tg.ReasonInvalidTool, "The call was approved but could not start: Tool %s was deleted.", DidNotRun},
	ApprovedToolChanged: {tg.PhaseFailed, tg.ReasonToolChanged, "The call was approved but could not start: %s; the approval covers the accepted version only. " +
		"Create the ToolCall again to run it with the Tool as it is now.", DidNotRun},

	HumanDenied:         {tg.PhaseDenied, tg.ReasonDenied, "A human denied the call.", DidNotRun},
	HumanDeniedWithNote: {tg.PhaseDenied, tg.ReasonDenied, "A human denied the call: %q.", DidNotRun},

	ApprovalExpired: {tg.PhaseExpired, tg.ReasonApprovalExpired, "The approval expired at %s, before the call could start.", DidNotRun},

	ProviderExpired:     {tg.PhaseApprovalUnavailable, tg.ReasonProviderExpired, "Approval could not be obtained: the provider's approval window closed without a decision.", DidNotRun},
	ProviderUnreachable: {tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: the approvals provider could not be reached before the waiting limit (%s).", DidNotRun},
	NoDecision:          {tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: no decision arrived before the waiting limit.", DidNotRun},
	NoDecisionWithdrawn: {tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained: no decision arrived before the waiting limit, so the request was withdrawn.", DidNotRun},
	ApprovedTooLate: {tg.PhaseApprovalUnavailable, tg.ReasonWaitingLimitReached, "Approval could not be obtained in time: the approval arrived after the waiting limit left room to run the tool.",
		DidNotRun},
	ApprovedProviderChanged: {tg.PhaseApprovalUnavailable, tg.ReasonProviderChanged, "Approval could not be obtained from the approver pool of Tool %s: the approval came from %s, " +
		"while the Tool's calls now go to %s. Create the ToolCall again to ask them.", DidNotRun},
	UntrustedSubmitAnswer: {tg.PhaseApprovalUnavailable, tg.ReasonUntrustedProviderResponse, "Approval could not be obtained: the provider's answer to the submission could not be trusted (%s).", DidNotRun},
	PreviewNotVerified: {tg.PhaseApprovalUnavailable, tg.ReasonPreviewNotVerified, "The call's preview cannot be trusted: %s. The manager puts a call to a human, " +
		"and runs it, only on a preview it ran and recorded itself; check who may write toolcalls/status and create Jobs in this namespace.", DidNotRun},
	UntrustedAnswer:     {tg.PhaseApprovalUnavailable, tg.ReasonUntrustedProviderResponse, "Approval could not be obtained: the provider's answer could not be trusted (%s).", DidNotRun},
	DecisionNotApproval: {tg.PhaseApprovalUnavailable, tg.ReasonUntrustedProviderResponse, "Approval could not be obtained: the recorded decision is not an approval.", DidNotRun},
	IdempotencyConflict: {tg.PhaseApprovalUnavailable, tg.ReasonIdempotencyConflict, "Approval could not be obtained: the approvals provider holds a different request under this call's " +
		"idempotency key (idempotency_conflict), and no request is ever made under a new key.", DidNotRun},
	RequestLost:      {tg.PhaseApprovalUnavailable, tg.ReasonApprovalRequestLost, "Approval could not be obtained: the approvals provider no longer knows the request.", DidNotRun},
	ArgumentsChanged: {tg.PhaseApprovalUnavailable, tg.ReasonArgumentsChanged, "Approval could not be obtained for these arguments: spec.arguments differ from the arguments the approval covers.", DidNotRun},

	ProviderCancelled: {tg.PhaseCancelled, tg.ReasonProviderCancelled, "The approval request was cancelled at the provider.", DidNotRun},
	ToolChangedWithdrawn: {tg.PhaseCancelled, tg.ReasonToolChanged, "The call could not be approved: %s, so the approval request was withdrawn before anyone decided; " +
		"an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now.", DidNotRun},
	ToolChangedNotWithdrawable: {tg.PhaseCancelled, tg.ReasonToolChanged, "The call could not be approved: %s, so the call ended before anyone decided (the provider cannot " +
		"withdraw the request; an approval of it is never used); an approval would cover the accepted version only. Create the ToolCall again to run it with the Tool as it is now.", DidNotRun},

	UnknownTool:   {tg.PhaseRejected, tg.ReasonUnknownTool, "spec.tool %q: no Tool in namespace %s has spec.toolName %q; ask an admin to create one, or fix spec.tool.", ""},
	AmbiguousTool: {tg.PhaseRejected, tg.ReasonAmbiguousTool, "spec.tool %q: Tools %s in namespace %s all have this toolName; an admin must keep only one.", ""},
	ArgumentsTooLarge: {tg.PhaseRejected, tg.ReasonArgumentsTooLarge, "spec.arguments is %d bytes serialized; the limit is %d bytes (64 KiB). " +
		"Pass large data by reference (a URL or an object name) instead.", ""},
	ArgumentsNotObject: {tg.PhaseRejected, tg.ReasonInvalidArguments, `spec.arguments must be a JSON object, e.g. {"payment_id": "payment_123"}.`, ""},
	ArgumentsTooDeep:   {tg.PhaseRejected, tg.ReasonInvalidArguments, "spec.arguments nests %d levels deep; at most %d are allowed. Flatten the arguments.", ""},
	ArgumentsInexactNumber: {tg.PhaseRejected, tg.ReasonInvalidArguments, "spec.arguments at %s holds the number %s, which cannot be carried exactly: approvals compare " +
		"and show numbers as 64-bit floating point (RFC 8785), exact for integers up to 2^53 (9007199254740992). Send it as a string instead.", ""},
	ArgumentsNotJSON:          {tg.PhaseRejected, tg.ReasonInvalidArguments, "spec.arguments is not valid JSON: %v", ""},
	ArgumentsDoNotMatchSchema: {tg.PhaseRejected, tg.ReasonInvalidArguments, "spec.arguments do not match Tool %s's argumentsSchema: %s", ""},
	SchemaInvalid:             {tg.PhaseRejected, tg.ReasonInvalidTool, "Tool %s has an invalid spec.argumentsSchema (%v); an admin must fix it.", ""},
	JobTemplateInvalid:        {tg.PhaseRejected, tg.ReasonInvalidTool, "Tool %s: its spec.jobTemplate does not make a valid Job (%v); an admin must fix the Tool.", ""},
	PreviewTemplateInvalid:    {tg.PhaseRejected, tg.ReasonInvalidTool, "Tool %s: its spec.preview.jobTemplate does not make a valid Job (%v); an admin must fix the Tool.", DidNotRun},
	PreviewFailed: {tg.PhaseRejected, tg.ReasonPreviewFailed, "Tool %s's preview could not say what the call would do (%s), and the Tool's spec.preview.onFailure " +
		"is Deny; no human was asked.", DidNotRun},
	RulesInvalid: {tg.PhaseRejected, tg.ReasonInvalidApprovalRules, "Tool %s: its spec.approval does not compile (%v); an admin must fix the Tool. " +
		"No human was asked and the call did not run.", ""},
	PolicyDenied:      {tg.PhaseRejected, tg.ReasonPolicyDenied, "Rule %s of Tool %s denied the call (spec.approval); no human was asked.", DidNotRun},
	TimeoutDoesNotFit: {tg.PhaseRejected, tg.ReasonTimeoutDoesNotFit, "spec.timeout: %v.", ""},
	RecordInvalid: {tg.PhaseRejected, tg.ReasonAcceptanceRecordInvalid, "The ToolCall carries the finalizer " + tg.Finalizer + ", which records that the controller " +
		"accepted it, but %s. The controller does not submit or run a ToolCall on an acceptance record it did not write: create ToolCalls without toolgate.dev/ " +
		"finalizers or annotations (the controller adds them).", DidNotRun},
	ToolChangedBeforeSubmission: {tg.PhaseRejected, tg.ReasonToolChanged, "The call could not be put to a human: %s; an approval would cover the accepted version only. " +
		"Create the ToolCall again to run it with the Tool as it is now.", DidNotRun},
	ProviderRefused: {tg.PhaseRejected, tg.ReasonProviderRefused, "The approvals provider refused the request before any human saw it (%s).", DidNotRun},
	ClusterProviderOff: {tg.PhaseRejected, tg.ReasonClusterProvidersOff, "Tool %s: its spec.providerRef names ClusterApprovalProvider %s, but this manager serves only " +
		"its namespaces and uses no ClusterApprovalProvider (--cluster-approval-providers=false, the chart's scope.namespaces); an admin must name an " +
		"ApprovalProvider of namespace %s in the Tool's spec.providerRef. No human was asked.", DidNotRun},
}

// Row returns the outcome's data.
func (o Outcome) Row() Row { return table[o] }

// Status is the outcome with its message written from args, as Format's verbs take them.
func (o Outcome) Status(args ...any) *Status {
	row := table[o]
	return &Status{outcome: o, Message: fmt.Sprintf(row.Format, args...) + row.Closing}
}

// Body is the part of a message of this outcome that the step's arguments filled in: the message
// without the row's Closing. It is how a later outcome quotes what an earlier one recorded.
func (o Outcome) Body(message string) string {
	return strings.TrimSuffix(message, table[o].Closing)
}

// Rows returns the outcome table, in the order of the outcomes.
func Rows() []Row { return slices.Clone(table[:]) }

// Status is what a step records in a ToolCall's status: an outcome's phase and reason, and the
// message written for this call. Only Outcome.Status makes one, so every status comes from the table.
type Status struct {
	outcome Outcome
	Message string
}

// Outcome is the row the status was written from.
func (s *Status) Outcome() Outcome { return s.outcome }

// Phase is the outcome's phase.
func (s *Status) Phase() tg.ToolCallPhase { return table[s.outcome].Phase }

// Reason is the outcome's reason.
func (s *Status) Reason() string { return table[s.outcome].Reason }

// Event names one row of the event table: the events the controller emits besides those of a phase
// change (which carry the new status's reason and message).
type Event int

// EventRow is an Event's data: its type, reason and action, and its note as a fmt format.
type EventRow struct {
	Type, Reason, Action string
	Format               string
}

const (
	// CancelledOnDelete: a deleted ToolCall's pending request was cancelled.
	CancelledOnDelete Event = iota
	// DecidedBeforeCancelOnDelete: a deleted ToolCall's request had been decided at the provider
	// before the cancellation reached it (the decision's status); nothing runs, the ToolCall is gone.
	DecidedBeforeCancelOnDelete
	// CannotCancelOnDelete: the provider cannot cancel a deleted ToolCall's request (the error code).
	CannotCancelOnDelete
	// GaveUpCancelOnDelete: cancelling a deleted ToolCall's request kept failing (the error code).
	GaveUpCancelOnDelete
	// CannotWithdraw: the provider cannot cancel the request of a call whose Tool changed (the error
	// code).
	CannotWithdraw
	// RulesUndecided: the Tool's approval rules could not decide; a human is asked (the Tool, the
	// error).
	RulesUndecided
	// RuleApproved: an Approve rule approved the call (the rule).
	RuleApproved
	// RequestIDNotOwn: status.requestID named a request other than the one the call submitted under
	// its own idempotency key; the call follows its own.
	RequestIDNotOwn
	// RuleApprovalNotVerified: the status recorded an approval by a rule (the rule) that the Tool's
	// rules do not give; it was dropped, and the call goes on as its rules decide.
	RuleApprovalNotVerified
	// ForeignJobFound: a Job under the call's Job name was not created by the manager (the Job, the
	// namespace).
	ForeignJobFound
	// ForeignPodFound: a Pod the call's Job counts was not made from its template (the Pod, the Job,
	// the namespace).
	ForeignPodFound

	events // the number of events
)

var eventTable = [events]EventRow{
	CancelledOnDelete: {corev1.EventTypeNormal, tg.ReasonCancelRequested, "Delete", "The ToolCall was deleted; its approval request was cancelled."},
	DecidedBeforeCancelOnDelete: {corev1.EventTypeNormal, tg.ReasonCancelRequested, "Delete",
		"The ToolCall was deleted; its approval request had already ended %s at the provider, so nothing was cancelled and nothing runs."},
	CannotCancelOnDelete: {corev1.EventTypeWarning, tg.ReasonCancelFailed, "Delete", "The approvals provider cannot cancel the approval request (%s); it ends at its provider deadline."},
	GaveUpCancelOnDelete: {corev1.EventTypeWarning, tg.ReasonCancelFailed, "Delete", "Gave up cancelling the approval request (%s); it ends at its provider deadline."},
	CannotWithdraw: {corev1.EventTypeWarning, tg.ReasonCancelFailed, "Withdraw",
		"The approvals provider cannot cancel the approval request (%s); it ends at its provider deadline, and an approval of it is never used."},
	RulesUndecided: {corev1.EventTypeWarning, tg.ReasonPolicyEvaluationFailed, "EvaluateRules", "Tool %s's approval rules could not decide (%v); a human is asked instead."},
	RuleApproved:   {corev1.EventTypeNormal, tg.ReasonPolicyApproved, "EvaluateRules", "Rule %s of the Tool's spec.approval approved the call; no human was asked."},
	RequestIDNotOwn: {corev1.EventTypeWarning, tg.ReasonRequestNotOwn, "ConfirmRequest", "status.requestID named a request this call did not submit, and was not used: " +
		"only the request submitted under the call's own idempotency key can start it. Check who may write toolcalls/status."},
	RuleApprovalNotVerified: {corev1.EventTypeWarning, tg.ReasonDecisionNotVerified, "EvaluateRules", "status.decision recorded an approval by rule %s that the Tool's rules " +
		"do not give, and was dropped: the call goes on as the rules decide. Check who may write toolcalls/status."},
	ForeignJobFound: {corev1.EventTypeWarning, tg.ReasonForeignJob, "VerifyJob", "Job %s carries this call's Job name but was not created by Toolgate " +
		"(no valid " + tg.AnnotationExecutionProof + "); it is not taken as the call's run. Check who may create Jobs in namespace %s."},
	ForeignPodFound: {corev1.EventTypeWarning, tg.ReasonForeignPod, "VerifyJob", "Pod %s was counted by Job %s but not made from its template; " +
		"the Job's outcome is not taken as the tool's. Check who may create Pods in namespace %s."},
}

// Row returns the event's data.
func (e Event) Row() EventRow { return eventTable[e] }

// Note is the event's note written from args.
func (e Event) Note(args ...any) string { return fmt.Sprintf(eventTable[e].Format, args...) }

// EventRows returns the event table, in the order of the events.
func EventRows() []EventRow { return slices.Clone(eventTable[:]) }
