package mcpcall

import (
	"fmt"
	"strconv"
)

// Preview mode: the ToolCall controller runs the preview Job of a Tool (an MCPServer's spec.previews
// makes one the Job that calls the preview tool) with TOOLGATE_MODE=preview and
// TOOLGATE_PREVIEW_MAX_BYTES set to the Tool's spec.preview.maxBytes. The manager refuses a preview
// longer than that, never cutting it itself; mcp-call cuts the preview tool's answer to it, with the
// marker that says so, so that a long answer is shown cut rather than refused.
const (
	// EnvMode is the env that says which run it is: ModePreview in a preview Job.
	EnvMode = "TOOLGATE_MODE"
	// ModePreview is EnvMode's value in a preview Job.
	ModePreview = "preview"
	// EnvPreviewMaxBytes is the env that carries the preview's maxBytes.
	EnvPreviewMaxBytes = "TOOLGATE_PREVIEW_MAX_BYTES"
	// MaxPreviewBytes is the largest maxBytes of a preview, and the bound when EnvPreviewMaxBytes is
	// not set in preview mode.
	MaxPreviewBytes = 4000
)

// ParseMessageBytes is the most bytes the message may have, from EnvMode and EnvPreviewMaxBytes:
// MaxMessageBytes outside preview mode; in it, maxBytes, a number from 1 to MaxPreviewBytes
// (MaxPreviewBytes when it is empty).
func ParseMessageBytes(mode, maxBytes string) (int, error) {
	if mode != ModePreview {
		return MaxMessageBytes, nil
	}
	if maxBytes == "" {
		return MaxPreviewBytes, nil
	}
	n, err := strconv.Atoi(maxBytes)
	if err != nil || n < 1 || n > MaxPreviewBytes {
		return 0, fmt.Errorf("%s is %q: in preview mode (%s=%s) it must be a number of bytes from 1 to %d, the Tool's spec.preview.maxBytes, which the manager sets; leave it unset for %d",
			EnvPreviewMaxBytes, maxBytes, EnvMode, ModePreview, MaxPreviewBytes, MaxPreviewBytes)
	}
	return n, nil
}
