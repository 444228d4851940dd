package controllers

import (
	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/approvalproviders"
	"toolgate.dev/toolgate/controllers/internal/lifecycle"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/controllers/mcpservers"
	"toolgate.dev/toolgate/controllers/tools"
)

// Outcomes is the outcome table: every phase the controller records, with its reason and how its
// message is written. docs/troubleshooting.md has a row for each (phase, reason) pair of it.
func Outcomes() []lifecycle.Row { return lifecycle.Rows() }

// Events is the table of the events the controller emits besides those of a phase change, with their
// type, reason and action. docs/troubleshooting.md lists each reason with its type.
func Events() []lifecycle.EventRow { return lifecycle.EventRows() }

// Readiness is every reason of the Ready condition of Tools, ApprovalProviders and
// ClusterApprovalProviders, with what it means: the conditions kstatus reads, the health Argo CD's
// check gives, and the type of the event that reports Ready changing to it (with it as reason).
// docs/gitops.md has a row for each.
func Readiness() []readiness.Row {
	rows := tools.Readiness()
	rows = append(rows, approvalproviders.Readiness(tg.KindApprovalProvider)...)
	rows = append(rows, approvalproviders.Readiness(tg.KindClusterApprovalProvider)...)
	return append(rows, mcpservers.Readiness()...)
}
