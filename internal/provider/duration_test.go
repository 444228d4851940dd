package provider_test

import (
	"regexp"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"toolgate.dev/toolgate/internal/provider"
)

var aapDuration = regexp.MustCompile(`^[1-9][0-9]*(s|m|h)$`)

func TestFormatTimeout(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m"},
		{90 * time.Second, "90s"},
		{30 * time.Minute, "30m"},
		{44 * time.Minute, "44m"},
		{44*time.Minute + 29*time.Second, "2669s"},
		{44*time.Minute + 29*time.Second + 999*time.Millisecond, "2669s"},
		{time.Hour, "1h"},
		{time.Hour + 30*time.Minute, "90m"},
		{time.Hour + 30*time.Minute + 500*time.Millisecond, "90m"},
		{time.Hour + time.Second, "3601s"},
		{2 * time.Hour, "2h"},
		{24 * time.Hour, "24h"},
		{168 * time.Hour, "168h"},
		{25*time.Hour + time.Minute, "1501m"},
	}
	for _, tc := range cases {
		g := NewWithT(t)
		got, err := provider.FormatTimeout(tc.d)
		g.Expect(err).NotTo(HaveOccurred(), tc.d.String())
		g.Expect(got).To(Equal(tc.want), tc.d.String())
		g.Expect(got).To(MatchRegexp(aapDuration.String()))
		back, err := time.ParseDuration(got)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(back).To(Equal(tc.d.Truncate(time.Second)), "rounded down to the second, nothing else lost")
	}
	for _, d := range []time.Duration{0, time.Nanosecond, 999 * time.Millisecond, -time.Second, -time.Hour} {
		got, err := provider.FormatTimeout(d)
		NewWithT(t).Expect(err).To(MatchError(ContainSubstring("shorter than 1s")), d.String())
		NewWithT(t).Expect(got).To(BeEmpty())
	}
}
