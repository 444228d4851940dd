package main

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// --poll-wait is refused under a second and over AAP's 30s cap, with a message that names the flag.
func TestCheckPollWait(t *testing.T) {
	for _, c := range []struct {
		wait    time.Duration
		wantErr string
	}{
		{wait: time.Second},
		{wait: 25 * time.Second},
		{wait: 30 * time.Second},
		{wait: 31 * time.Second, wantErr: "--poll-wait 31s: use a wait between 1s and 30s (AAP caps a long poll's wait at 30s)"},
		{wait: 500 * time.Millisecond, wantErr: "--poll-wait 500ms: use a wait between 1s and 30s (AAP caps a long poll's wait at 30s)"},
		{wait: 0, wantErr: "--poll-wait 0s: use a wait between 1s and 30s (AAP caps a long poll's wait at 30s)"},
	} {
		t.Run(c.wait.String(), func(t *testing.T) {
			g := NewWithT(t)
			err := checkPollWait(c.wait)
			if c.wantErr != "" {
				g.Expect(err).To(MatchError(c.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}
