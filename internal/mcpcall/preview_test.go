package mcpcall_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpcall"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// mcp-call reads the env the ToolCall controller gives a preview Job (it cannot import the API).
func TestPreviewEnvIsTheControllers(t *testing.T) {
	g := NewWithT(t)
	g.Expect(mcpcall.EnvMode).To(Equal(tg.PreviewModeEnv))
	g.Expect(mcpcall.EnvPreviewMaxBytes).To(Equal(tg.PreviewMaxBytesEnv))
	g.Expect(mcpcall.MaxPreviewBytes).To(Equal(tg.MaxPreviewBytes))
}

func TestParseMessageBytes(t *testing.T) {
	for _, c := range []struct {
		mode, maxBytes string
		want           int
		err            string
	}{
		{"", "", mcpcall.MaxMessageBytes, ""},
		{"execute", "100", mcpcall.MaxMessageBytes, ""},
		{"", "nonsense", mcpcall.MaxMessageBytes, ""},
		{"preview", "", 4000, ""},
		{"preview", "1", 1, ""},
		{"preview", "250", 250, ""},
		{"preview", "4000", 4000, ""},
		{"preview", "0", 0, `TOOLGATE_PREVIEW_MAX_BYTES is "0": in preview mode (TOOLGATE_MODE=preview) it must be a number of bytes from 1 to 4000`},
		{"preview", "4001", 0, "from 1 to 4000"},
		{"preview", "4k", 0, `TOOLGATE_PREVIEW_MAX_BYTES is "4k"`},
	} {
		got, err := mcpcall.ParseMessageBytes(c.mode, c.maxBytes)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("ParseMessageBytes(%q, %q) = %d, %v; want %d, %q", c.mode, c.maxBytes, got, err, c.want, c.err)
		}
	}
}

// In preview mode the preview tool's long answer is cut to the preview's maxBytes, with the marker,
// on a character boundary: the tool answered (exit 0), and the manager gets a preview it can show.
func TestPreviewModeCutsTheAnswerToMaxBytes(t *testing.T) {
	srv := bigTool(t, 10000, false)
	for _, max := range []int{4000, 300, 61} {
		g := NewWithT(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		o := mcpcall.Run(ctx, mcpcall.Call{
			Server: mcpclient.Config{URL: srv.URL, AllowInsecureHTTP: true, Version: "test"},
			Tool:   "big", Arguments: []byte(`{}`), MessageBytes: max,
		})
		cancel()
		g.Expect(o.Code).To(Equal(mcpcall.ExitSucceeded), o.Message)
		g.Expect(len(o.Message)).To(BeNumerically("<=", max), "maxBytes %d", max)
		g.Expect(o.Message).To(MatchRegexp(`^a*\n\[mcp-call: result truncated, \d+ of 10000 bytes shown\]$`))
		g.Expect(o.Message).To(Equal(mcpcall.Cut(strings.Repeat("a", 10000), max)))
	}
}

// Cut keeps its marker within any bound that has room for it, on a character boundary; a bound
// without room gives the marker alone, so that a cut is never hidden.
func TestCutToASmallBound(t *testing.T) {
	g := NewWithT(t)
	s := strings.Repeat("é", 3000)
	for _, max := range []int{4000, 999, 100, 60} {
		out := mcpcall.Cut(s, max)
		g.Expect(len(out)).To(BeNumerically("<=", max))
		g.Expect(utf8.ValidString(out)).To(BeTrue())
		g.Expect(out).To(ContainSubstring("bytes shown]"))
	}
	g.Expect(mcpcall.Cut(s, 10)).To(Equal("\n[mcp-call: result truncated, 0 of 6000 bytes shown]"))
	g.Expect(mcpcall.Cut(s, -5)).To(Equal("\n[mcp-call: result truncated, 0 of 6000 bytes shown]"))
	g.Expect(mcpcall.Cut("short", 10)).To(Equal("short"))
}
