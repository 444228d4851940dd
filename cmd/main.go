// Command manager runs the Toolgate controller: every ToolCall waits for a human approval from the
// approvals provider before its Job is created. Its flags are in internal/managercmd.
package main

import "toolgate.dev/toolgate/internal/managercmd"

func main() { managercmd.Main() }
