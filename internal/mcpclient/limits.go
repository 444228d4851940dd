package mcpclient

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What the client reads from a server is bounded: a server cannot make its reader hold more than
// these limits, whatever it answers. The transport enforces the byte limits on the bodies as they
// are read (the SDK reads an answer whole with io.ReadAll and, given a MaxEventSize of 0, buffers an
// SSE event with no cap); ListTools and CheckTool enforce the others.

// Limit names one of Limits' bounds.
type Limit string

const (
	// LimitResponse: the bytes of a session's answers together (see Limits.MaxResponseBytes).
	LimitResponse Limit = "response"
	// LimitEvent: the bytes of one server-sent event.
	LimitEvent Limit = "event"
	// LimitTools: the tools of one listing, over all its pages.
	LimitTools Limit = "tools"
	// LimitSchema: the bytes of one tool's inputSchema, as JSON.
	LimitSchema Limit = "schema"
	// LimitDescription: the bytes of one tool's description.
	LimitDescription Limit = "description"
	// LimitName: the bytes of one tool's name.
	LimitName Limit = "name"
)

// Limits bound what a session reads from the server. A zero field takes its default
// (DefaultLimits).
type Limits struct {
	// MaxResponseBytes bounds the bytes of the session's answers together: every HTTP response
	// body, JSON or an SSE stream answering a request, but not the standalone SSE stream a
	// listening session keeps open (each of its events is bounded by MaxEventBytes). One listing
	// (initialize and every tools/list page) is one session.
	MaxResponseBytes int64
	// MaxEventBytes bounds one server-sent event, on any stream.
	MaxEventBytes int64
	// MaxTools bounds the tools of one listing, over all its pages (and the number of pages).
	MaxTools int
	// MaxSchemaBytes bounds one tool's inputSchema, as JSON.
	MaxSchemaBytes int
	// MaxDescriptionBytes bounds one tool's description (and its title).
	MaxDescriptionBytes int
	// MaxNameBytes bounds one tool's name.
	MaxNameBytes int
}

// DefaultLimits are the limits a zero Limits field takes. They keep a listing within tens of MiB of
// heap at most (decoded JSON takes a few times its size), so that a manager listing several servers
// at once stays within the chart's memory limit.
func DefaultLimits() Limits {
	return Limits{
		MaxResponseBytes:    4 << 20,
		MaxEventBytes:       4 << 20,
		MaxTools:            2000,
		MaxSchemaBytes:      64 << 10,
		MaxDescriptionBytes: 16 << 10,
		MaxNameBytes:        128,
	}
}

// WithDefaults fills the fields left zero (or negative) from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = d.MaxResponseBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = d.MaxEventBytes
	}
	if l.MaxTools <= 0 {
		l.MaxTools = d.MaxTools
	}
	if l.MaxSchemaBytes <= 0 {
		l.MaxSchemaBytes = d.MaxSchemaBytes
	}
	if l.MaxDescriptionBytes <= 0 {
		l.MaxDescriptionBytes = d.MaxDescriptionBytes
	}
	if l.MaxNameBytes <= 0 {
		l.MaxNameBytes = d.MaxNameBytes
	}
	return l
}

// LimitError says that the server went over a limit. Its message is stable: it names the limit and
// its value, never how far the server went.
type LimitError struct {
	Limit Limit
	Max   int64
}

func (e *LimitError) Error() string {
	switch e.Limit {
	case LimitResponse:
		return fmt.Sprintf("the server's answers are larger than %d bytes", e.Max)
	case LimitEvent:
		return fmt.Sprintf("the server sent an SSE event larger than %d bytes", e.Max)
	case LimitTools:
		return fmt.Sprintf("the server lists more than %d tools", e.Max)
	case LimitSchema:
		return fmt.Sprintf("the tool's inputSchema is larger than %d bytes", e.Max)
	case LimitDescription:
		return fmt.Sprintf("the tool's description is larger than %d bytes", e.Max)
	case LimitName:
		return fmt.Sprintf("the tool's name is longer than %d bytes", e.Max)
	}
	return fmt.Sprintf("the server went over the %s limit of %d", e.Limit, e.Max)
}

// CheckTool reports the first per-tool limit t goes over (name, description or title, inputSchema
// as JSON), nil when none.
func (l Limits) CheckTool(t *mcp.Tool) *LimitError {
	l = l.WithDefaults()
	switch {
	case len(t.Name) > l.MaxNameBytes:
		return &LimitError{LimitName, int64(l.MaxNameBytes)}
	case len(t.Description) > l.MaxDescriptionBytes || len(t.Title) > l.MaxDescriptionBytes:
		return &LimitError{LimitDescription, int64(l.MaxDescriptionBytes)}
	}
	if n, err := jsonSize(t.InputSchema); err != nil || n > l.MaxSchemaBytes {
		return &LimitError{LimitSchema, int64(l.MaxSchemaBytes)}
	}
	return nil
}

// ShortName is name cut to at most max bytes (valid UTF-8, "..." added when cut), to name a tool
// whose name is over the limit.
func ShortName(name string, max int) string {
	if len(name) <= max {
		return name
	}
	cut := name[:max]
	for len(cut) > 0 && !utf8.ValidString(cut) {
		cut = cut[:len(cut)-1]
	}
	return cut + "..."
}

// guard is one session's account of what the server sent: the bytes of its answers, the first limit
// it went over, the first transport error and the first HTTP status that was not a success. It
// wraps the session's HTTP transport.
type guard struct {
	base   http.RoundTripper
	limits Limits
	// onExceed, when set, hears the first limit the server goes over.
	onExceed func(*LimitError)

	mu       sync.Mutex
	read     int64
	exceeded *LimitError
	netErr   error
	status   int
}

func (g *guard) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.base.RoundTrip(req)
	if err != nil {
		g.note(func() {
			if g.netErr == nil {
				g.netErr = err
			}
		})
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		g.note(func() {
			if g.status == 0 {
				g.status = resp.StatusCode
			}
		})
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	body := &boundedBody{rc: resp.Body, g: g, answer: !(req.Method == http.MethodGet && mt == "text/event-stream"), lineStart: true}
	if mt == "text/event-stream" {
		body.eventMax = g.limits.MaxEventBytes
	}
	resp.Body = body
	return resp, nil
}

func (g *guard) note(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f()
}

// exceed records that the server went over limit l, and returns the error the read fails with.
func (g *guard) exceed(l Limit, max int64) error {
	e := &LimitError{l, max}
	first := false
	g.note(func() {
		if g.exceeded == nil {
			g.exceeded, first = e, true
		}
	})
	if first && g.onExceed != nil {
		g.onExceed(e)
	}
	return e
}

// addRead counts n bytes of answers; false when they go over the session's budget.
func (g *guard) addRead(n int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.read += int64(n)
	return g.read <= g.limits.MaxResponseBytes
}

// state is what the guard saw, read once the session failed.
func (g *guard) state() (exceeded *LimitError, netErr error, status int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.exceeded, g.netErr, g.status
}

// boundedBody is a response body read within the session's budget (when answer) and, for an SSE
// stream, within the event limit: it counts the bytes of the event being read, up to the empty line
// that ends it.
type boundedBody struct {
	rc     io.ReadCloser
	g      *guard
	answer bool

	eventMax  int64 // 0: not an event stream
	eventLen  int64
	lineStart bool
	afterCR   bool
	failed    error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.failed != nil {
		return 0, b.failed
	}
	n, err := b.rc.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		b.g.note(func() {
			if b.g.netErr == nil {
				b.g.netErr = err
			}
		})
	}
	if b.answer && n > 0 && !b.g.addRead(n) {
		b.failed = b.g.exceed(LimitResponse, b.g.limits.MaxResponseBytes)
		return 0, b.failed
	}
	if b.eventMax > 0 {
		for _, c := range p[:n] {
			switch {
			case c == '\n' && b.afterCR: // the \n of \r\n
				b.afterCR = false
			case c == '\r' || c == '\n':
				if b.lineStart { // an empty line ends the event
					b.eventLen = 0
				}
				b.lineStart, b.afterCR = true, c == '\r'
			default:
				b.lineStart, b.afterCR = false, false
				b.eventLen++
			}
		}
		if b.eventLen > b.eventMax {
			b.failed = b.g.exceed(LimitEvent, b.eventMax)
			return 0, b.failed
		}
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
