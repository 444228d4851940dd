package toolcall

import "testing"

// The saved position never passes a removal that is not withdrawn yet, never goes back before what
// was saved when the leader started, and stays there until the replay is done.
func TestGoneCursorPosition(t *testing.T) {
	ptr := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		run  func(c *goneCursor)
		want uint64
		ok   bool
	}{
		{name: "nothing seen", run: func(*goneCursor) {}, want: 0, ok: false},
		{name: "before the replay: the saved position", run: func(c *goneCursor) {
			c.replayed = false
			c.observe("90")
		}, want: 50, ok: true},
		{name: "events move it", run: func(c *goneCursor) { c.observe("70"); c.observe("60") }, want: 70, ok: true},
		{name: "never before the saved position", run: func(c *goneCursor) { c.observe("20") }, want: 50, ok: true},
		{name: "a held removal holds it back", run: func(c *goneCursor) {
			c.observe("70")
			c.hold("a", "80", nil)
			c.observe("95")
		}, want: 70, ok: true},
		{name: "released, it moves on", run: func(c *goneCursor) {
			c.observe("70")
			c.hold("a", "80", nil)
			c.observe("95")
			c.release("a")
		}, want: 95, ok: true},
		{name: "a replayed removal holds it at the saved position", run: func(c *goneCursor) {
			c.hold("r", "60", ptr(50))
			c.observe("99")
		}, want: 50, ok: true},
		{name: "the oldest of several", run: func(c *goneCursor) {
			c.observe("70")
			c.hold("a", "80", nil)
			c.hold("b", "90", nil)
			c.release("a")
		}, want: 80, ok: true},
		{name: "opaque resourceVersions: none", run: func(c *goneCursor) { c.observe("a1b2") }, want: 0, ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &goneCursor{start: 50, replayed: true}
			if tc.name == "nothing seen" {
				c.start = 0
			}
			tc.run(c)
			got, ok := c.position()
			if got != tc.want || ok != tc.ok {
				t.Errorf("position() = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
