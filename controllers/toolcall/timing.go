package toolcall

import "toolgate.dev/toolgate/controllers/internal/lifecycle"

// Timing holds the margins that place a ToolCall's approval and execution inside its waiting limit;
// Window is one ToolCall's timing. Both are the lifecycle package's.
type (
	Timing = lifecycle.Timing
	Window = lifecycle.Window
)
