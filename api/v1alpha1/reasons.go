package v1alpha1

// Finalizer keeps a ToolCall until no approval request for it can still be pending.
const Finalizer = "toolgate.dev/cancel-approval-request"

// Labels the controller puts on the Jobs (and their Pods) it creates.
const (
	LabelToolCallUID  = "toolgate.dev/toolcall-uid"
	LabelToolCallName = "toolgate.dev/toolcall"
	LabelToolName     = "toolgate.dev/tool"
)

// Condition types on a ToolCall.
const (
	// ConditionApproved: True once a valid approval was obtained; False when it will not be.
	ConditionApproved = "Approved"
	// ConditionExecuted: True once the Job exists (the tool was started); False when it never will.
	ConditionExecuted = "Executed"
	// ConditionReady: True once the ToolCall reached a terminal phase and its outcome is final.
	ConditionReady = "Ready"
)

// Reasons: used in status.reason, condition reasons and event reasons. Stable CamelCase words.
const (
	ReasonSubmitFailed        = "SubmitFailed"
	ReasonAwaitingApproval    = "AwaitingApproval"
	ReasonApproved            = "Approved"
	ReasonDenied              = "Denied"
	ReasonApprovalExpired     = "ApprovalExpired"
	ReasonProviderExpired     = "ProviderExpired"
	ReasonWaitingLimitReached = "WaitingLimitReached"
	ReasonProviderCancelled   = "ProviderCancelled"
	ReasonProviderRefused     = "ProviderRefused"
	ReasonUntrustedResponse   = "UntrustedProviderResponse"
	ReasonUnknownTool         = "UnknownTool"
	ReasonAmbiguousTool       = "AmbiguousTool"
	ReasonInvalidArguments    = "InvalidArguments"
	ReasonArgumentsTooLarge   = "ArgumentsTooLarge"
	ReasonInvalidTool         = "InvalidTool"
	ReasonTimeoutDoesNotFit   = "TimeoutDoesNotFit"
	ReasonJobCreated          = "JobCreated"
	ReasonJobSucceeded        = "JobSucceeded"
	ReasonJobFailed           = "JobFailed"
	ReasonCancelRequested     = "CancelRequested"
	ReasonCancelFailed        = "CancelFailed"
)

// More reasons.
const (
	ReasonRequestLost = "ApprovalRequestLost"
	ReasonJobMissing  = "JobMissing"
	ReasonJobRefused  = "JobRefused"
	// ReasonArgumentsChanged: the approval covers other arguments than the spec now holds.
	ReasonArgumentsChanged = "ArgumentsChanged"
	// ReasonAcceptanceRecordInvalid: the ToolCall carries the finalizer but its acceptance annotations
	// are missing or are not values the controller would write (e.g. created with them).
	ReasonAcceptanceRecordInvalid = "AcceptanceRecordInvalid"
)

// Annotations the controller writes when it accepts a ToolCall (with its finalizer, before the first
// submission). They fix the ToolCall's timing and its approval request body for the rest of its life,
// so that a submission repeated after a crash is an exact replay.
const (
	// AnnotationExecutionTimeout is the Tool's executionTimeout at acceptance.
	AnnotationExecutionTimeout = "toolgate.dev/execution-timeout"
	// AnnotationApprovalTimeout is the approval timeout requested from the provider.
	AnnotationApprovalTimeout = "toolgate.dev/approval-timeout"
)

// Approval policies and version binding.
const (
	// ReasonPolicyDenied: a Deny rule of the Tool's spec.approval matched; the message names the rule.
	ReasonPolicyDenied = "PolicyDenied"
	// ReasonPolicyApproved: an Approve rule of the Tool's spec.approval matched; no human was asked.
	ReasonPolicyApproved = "PolicyApproved"
	// ReasonPolicyError: a rule could not be evaluated for this call; a human is asked instead.
	ReasonPolicyError = "PolicyEvaluationFailed"
	// ReasonInvalidApprovalRules: the Tool's spec.approval does not compile (Tool condition, and the
	// reason its calls end Rejected).
	ReasonInvalidApprovalRules = "InvalidApprovalRules"
	// ReasonApprovalRulesCompiled: every rule of the Tool's spec.approval compiled (Tool condition).
	ReasonApprovalRulesCompiled = "ApprovalRulesCompiled"
	// ReasonToolChanged: the Tool was changed, or deleted and created again, after the ToolCall was
	// accepted; the approval covers the accepted version only, so the call does not run.
	ReasonToolChanged = "ToolChanged"
)

// ReasonImageUnavailable: the call's Job exists but its container has not started because the node
// cannot get the image (ErrImageNeverPull, ErrImagePull/ImagePullBackOff, InvalidImageName,
// ImageInspectError); a Running call, or a Failed one whose Job's deadline passed while it waited.
const ReasonImageUnavailable = "ImageUnavailable"

// ConditionApprovalRulesReady is the Tool condition that says whether its approval rules compiled.
const ConditionApprovalRulesReady = "ApprovalRulesReady"

// Annotations of the acceptance record that bind a ToolCall to the version of its Tool: the Job is
// created only from the Tool with this UID at this generation.
const (
	// AnnotationToolUID is the UID of the Tool at acceptance.
	AnnotationToolUID = "toolgate.dev/tool-uid"
	// AnnotationToolGeneration is the Tool's metadata.generation at acceptance.
	AnnotationToolGeneration = "toolgate.dev/tool-generation"
	// AnnotationApprovalRule names the Approve rule that decided the call at acceptance. Its presence
	// records that no request was ever submitted for the call, so none is recovered or withdrawn after
	// a crash, even once the Tool (and with it the rule) has changed.
	AnnotationApprovalRule = "toolgate.dev/approval-rule"
)
