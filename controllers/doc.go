// Package controllers is Toolgate's manager: three reconcilers, the AAP webhook receiver, and their
// wiring. Setup (manager.go) adds them to a controller-runtime manager built with ManagerOptions.
//
// The ToolCall reconciler (ToolCallReconciler) puts a human approval in front of every ToolCall and
// runs the Tool's Job only for a valid approval. Its Reconcile and phase table are in
// toolcall_controller.go; each step has a file: acceptance.go (accepting a call, checking an
// acceptance record), policy.go (the Tool's approval rules), approval.go (submitting, waiting,
// applying a decision, cancelling), asyncwait.go (waiting for notifications in asynchronous mode),
// toolversion.go (a Tool changed under a waiting call), job.go and jobpods.go (the run gate, the Job,
// its Pods), deletion.go, and gone.go with gonereplay.go (ToolCalls the apiserver removed despite
// their finalizer). scope.go, status.go, outcomes.go and writelog.go are how a reconcile reads and
// writes its ToolCall, through the merge patches of controllers/internal/mergepatch; timing.go is its
// clock. The long polls run in internal/waiter.
//
// The Tool reconciler (package controllers/tool) reports whether each Tool's approval rules compile.
// It shares with the ToolCall reconciler one cache of what is derived from each Tool generation
// (controllers/internal/toolcache). toolindex.go is how a call finds its Tool.
//
// The provider objects' reconciler (package controllers/approvalprovider, for ApprovalProviders and
// ClusterApprovalProviders) checks each one's credential and reachability (controller.go),
// provisions its AAP instance (provisioning.go) and registers its webhook receiver (delivery.go). Its
// steps return a *providers.Unusable error that carries the Ready condition's reason. The registry of
// provider clients, which Secrets may serve them and why one cannot serve is its own package,
// controllers/internal/providers, shared by every reconciler and the receiver; providercalls.go holds
// the bounded calls a ToolCall makes through it.
//
// The receiver (package controllers/receiver) takes AAP's signed notifications and hands
// the decision to read to the ToolCall reconciler.
//
// Every field index of the manager's cache is named and registered in indexes.go; the metrics are in
// metrics.go; restmapper.go keeps the REST mappings the manager's cache asks for, and metatime.go
// holds the time helpers of the API's timestamps.
package controllers
