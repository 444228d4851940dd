package reference

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// The preview. Toolgate runs a Tool's preview Job before it submits the call, and sends what the
// Job's first container wrote in the request's context, under "preview":
//
//	{"source": "tool", "format": "json", "output": {...}, "digest": "sha256:...", "image": "...", "image_id": "..."}
//	{"source": "tool", "format": "text", "output": "...", ...}
//	{"source": "tool", "failed": true, "error": "...", "image": "..."}   (the Tool asks anyway)
//
// It is the tool's own claim of what the call would do: Toolgate ran it but does not check what it
// says. The page shows it in a section of its own, labelled so, as text and bounded: the output is at
// most 4000 bytes when Toolgate sends it, but the context is whatever the submission holds.

const (
	// maxPreviewShown bounds the output the page shows, as rendered (pretty-printed JSON, escapes);
	// a longer one is cut and says so.
	maxPreviewShown = 16000
	// maxPreviewError bounds a failed preview's error as shown.
	maxPreviewError = 2000
	// maxPreviewFact bounds the digest, the image and the image ID as shown.
	maxPreviewFact = 512
	// previewSource is the only source of a preview: the tool itself.
	previewSource = "tool"
)

// pagePreview is the preview of a request as the page shows it. Every text is shown with the
// characters a reader could not see or tell apart written as escapes.
type pagePreview struct {
	// Failed is set when the preview did not say what the call would do: the tool's preview failed
	// (and the Tool asked anyway), or the context's preview is not what Toolgate sends. Error says why.
	Failed bool   `json:"failed,omitempty"`
	Error  string `json:"error,omitempty"`
	// Format is json or text; Output the output, pretty-printed JSON or the text.
	Format string `json:"format,omitempty"`
	Output string `json:"output,omitempty"`
	// Cut is set when the output is longer than the page shows (maxPreviewShown).
	Cut     bool   `json:"cut,omitempty"`
	Digest  string `json:"digest,omitempty"`
	Image   string `json:"image,omitempty"`
	ImageID string `json:"image_id,omitempty"`
}

// previewClaim is the preview object of a request's context, as Toolgate sends it.
type previewClaim struct {
	Source  string          `json:"source"`
	Format  string          `json:"format"`
	Output  json.RawMessage `json:"output"`
	Digest  string          `json:"digest"`
	Image   string          `json:"image"`
	ImageID string          `json:"image_id"`
	Failed  bool            `json:"failed"`
	Error   string          `json:"error"`
}

// newPagePreview reads the preview of a request's context (a JSON object, or nil). It returns nil when
// the context has none.
func newPagePreview(context []byte) *pagePreview {
	if len(context) == 0 {
		return nil
	}
	var doc struct {
		Preview json.RawMessage `json:"preview"`
	}
	if json.Unmarshal(context, &doc) != nil {
		return nil // not reached: a stored context is a JSON object
	}
	raw := bytes.TrimSpace(doc.Preview)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var claim previewClaim
	if raw[0] != '{' {
		return unreadablePreview("context.preview must be an object: source, format, output, digest, image and image_id, " +
			"or source, failed, error and image")
	}
	if err := json.Unmarshal(raw, &claim); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			want := "a string"
			if typeErr.Type.Kind() == reflect.Bool {
				want = "true or false"
			}
			return unreadablePreview("context.preview.%s must be %s, not %s", typeErr.Field, want, typeErr.Value)
		}
		return unreadablePreview("%v", err) // not reached: a stored context is valid JSON
	}
	if claim.Source != previewSource {
		return unreadablePreview(`context.preview.source is "%s": the page shows previews whose source is "%s"`,
			boundedText(claim.Source, maxPreviewFact), previewSource)
	}
	p := &pagePreview{
		Digest:  boundedText(claim.Digest, maxPreviewFact),
		Image:   boundedText(claim.Image, maxPreviewFact),
		ImageID: boundedText(claim.ImageID, maxPreviewFact),
	}
	if claim.Failed {
		p.Failed = true
		p.Error, _ = bounded(visibleProse(claim.Error), maxPreviewError)
		if p.Error == "" {
			p.Error = "no reason given"
		}
		return p
	}
	output := bytes.TrimSpace(claim.Output)
	if len(output) == 0 || bytes.Equal(output, []byte("null")) {
		return unreadablePreview("context.preview.output is missing: a preview that did not fail has an output")
	}
	switch claim.Format {
	case "json":
		p.Format = "json"
		p.Output, p.Cut = prettyJSONUpTo(output, maxPreviewShown)
	case "text":
		var text string
		if json.Unmarshal(output, &text) != nil {
			return unreadablePreview("context.preview.output must be a string when context.preview.format is text")
		}
		p.Format = "text"
		p.Output, p.Cut = bounded(visibleProse(text), maxPreviewShown)
	default:
		return unreadablePreview(`context.preview.format is "%s": it must be json or text`,
			boundedText(claim.Format, maxPreviewFact))
	}
	return p
}

// unreadablePreview is the preview shown for a context whose preview is not in the shape Toolgate sends.
func unreadablePreview(format string, args ...any) *pagePreview {
	reason, _ := bounded(visibleProse(fmt.Sprintf(format, args...)), maxPreviewError)
	return &pagePreview{Failed: true, Error: "the request's context.preview cannot be read (" + reason + ")"}
}

// boundedText is s as the page shows a short text (visibleText), at most limit bytes.
func boundedText(s string, limit int) string {
	out, _ := bounded(visibleText(s), limit)
	return out
}

// bounded returns s cut to at most limit bytes at a character boundary, and whether it was cut.
func bounded(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	end := limit
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end], true
}

// PreviewShown is the item's preview, or an empty one, for the page's template: the template renders
// the preview's section for every request, hidden when there is no preview, so that the page's script
// can fill it in for requests that arrive later.
func (i pageItem) PreviewShown() pagePreview {
	if i.Preview == nil {
		return pagePreview{}
	}
	return *i.Preview
}
