package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// --log-level keeps its values on the logr/zap logger: each level lets through the lines it names and
// the more severe ones, the MCP SDK's slog lines (bridged with logr.ToSlogHandler) included. warn is
// info: logr has no warning level, and the bridge treats slog's warnings as info.
func TestLogLevel(t *testing.T) {
	all := []string{"gateway debug", "gateway info", "sdk info", "sdk warn", "gateway error", "sdk error"}
	for _, c := range []struct {
		level       string
		zapLevelSet bool
		want        []string // the messages written
		wantErr     string
	}{
		{level: "", want: all[1:]}, // zap's default: info
		{level: "debug", want: all},
		{level: "info", want: all[1:]},
		{level: "warn", want: all[1:]},
		{level: "WARN", want: all[1:]},
		{level: "error", want: all[4:]},
		{level: "verbose", wantErr: `--log-level "verbose": use debug, info, warn or error`},
		{level: "panic", wantErr: `--log-level "panic": use debug, info, warn or error`},
		{level: "info", zapLevelSet: true, wantErr: "--log-level info and --zap-log-level both given: give one of the two"},
	} {
		t.Run(c.level, func(t *testing.T) {
			g := NewWithT(t)
			opts := zap.Options{}
			err := applyLogLevel(&opts, c.level, c.zapLevelSet)
			if c.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(c.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			var out bytes.Buffer
			logger := zap.New(zap.UseFlagOptions(&opts), zap.WriteTo(&out))
			logAll(logger)
			g.Expect(messages(g, &out)).To(Equal(c.want))
		})
	}
}

// logAll writes one line at each severity, as the gateway (logr) and as the MCP SDK (slog).
func logAll(logger logr.Logger) {
	sdk := slog.New(logr.ToSlogHandler(logger))
	logger.V(1).Info("gateway debug")
	logger.Info("gateway info")
	sdk.Info("sdk info")
	sdk.Warn("sdk warn")
	logger.Error(errors.New("boom"), "gateway error")
	sdk.Error("sdk error")
}

func messages(g *WithT, out *bytes.Buffer) []string {
	msgs := []string{}
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var l struct {
			Msg string `json:"msg"`
		}
		g.Expect(json.Unmarshal(lines.Bytes(), &l)).To(Succeed(), "a JSON line: %s", lines.Text())
		msgs = append(msgs, l.Msg)
	}
	return msgs
}
