// Command echotool is the e2e suite's tool that returns its input: it writes the value of
// TOOL_ARGUMENTS, exactly as its container received it, to /dev/termination-log, which Toolgate
// records as the call's status.result. The suite compares that with the arguments the human
// approved, to show that nothing between the ToolCall and the container rewrites them.
package main

import (
	"fmt"
	"os"
)

func main() {
	args, ok := os.LookupEnv("TOOL_ARGUMENTS")
	if !ok {
		fmt.Fprintln(os.Stderr, "echotool: TOOL_ARGUMENTS is not set: run this program as a Toolgate Tool's container")
		os.Exit(2)
	}
	if err := os.WriteFile("/dev/termination-log", []byte(args), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "echotool:", err)
		os.Exit(1)
	}
	fmt.Printf("echoed %d bytes of TOOL_ARGUMENTS\n", len(args))
}
