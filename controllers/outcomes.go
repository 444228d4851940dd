package controllers

import "toolgate.dev/toolgate/controllers/internal/lifecycle"

// Outcomes is the outcome table: every phase the controller records, with its reason and how its
// message is written. docs/troubleshooting.md has a row for each (phase, reason) pair of it.
func Outcomes() []lifecycle.Row { return lifecycle.Rows() }

// Events is the table of the events the controller emits besides those of a phase change, with their
// type, reason and action. docs/troubleshooting.md lists each reason with its type.
func Events() []lifecycle.EventRow { return lifecycle.EventRows() }
