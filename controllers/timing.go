package controllers

import (
	"time"

	"toolgate.dev/toolgate/controllers/internal/lifecycle"
)

// Timing holds the margins that place a ToolCall's approval and execution inside its waiting limit;
// Window is one ToolCall's timing. Both are the lifecycle package's, under the names the manager's
// options use.
type (
	Timing = lifecycle.Timing
	Window = lifecycle.Window
)

// DefaultTiming returns the default margins.
func DefaultTiming() Timing { return lifecycle.DefaultTiming() }

// CheckFinishedCallTTL refuses an Options.FinishedCallTTL (--finished-toolcall-ttl) that is negative
// or shorter than a minute; 0 keeps finished ToolCalls forever.
func CheckFinishedCallTTL(ttl time.Duration) error { return lifecycle.CheckFinishedCallTTL(ttl) }
