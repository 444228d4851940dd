package mcpservers

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"k8s.io/utils/clock"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// Options bound what the controller reads from MCP servers and how often a server may have its
// tools listed.
type Options struct {
	// Limits bound each listing (mcpclient.Limits; zero fields take mcpclient.DefaultLimits).
	Limits mcpclient.Limits
	// ListingInterval is the least time between two listings of one server that its
	// notifications/tools/list_changed ask for: however many it sends, they cost at most one listing
	// per interval (0: DefaultListingInterval).
	ListingInterval time.Duration
	// Clock paces those listings (nil: the real clock).
	Clock clock.Clock
	// ExecutorImage is the mcp-call image of the Jobs of MCPServers that name none in
	// spec.executor.image (or the deprecated spec.executorImage); "": none, such an MCPServer is
	// reported InvalidMCPServerSpec.
	ExecutorImage string
}

// DefaultListingInterval is Options.ListingInterval's default.
const DefaultListingInterval = 10 * time.Second

// WithDefaults fills the options left zero.
func (o Options) WithDefaults() Options {
	o.Limits = o.Limits.WithDefaults()
	if o.ListingInterval <= 0 {
		o.ListingInterval = DefaultListingInterval
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return o
}

// The manager's flags that set Options, named in the status of an MCPServer that goes over a limit.
const (
	FlagMaxResponseBytes    = "mcp-max-response-bytes"
	FlagMaxEventBytes       = "mcp-max-event-bytes"
	FlagMaxTools            = "mcp-max-tools"
	FlagMaxSchemaBytes      = "mcp-max-schema-bytes"
	FlagMaxDescriptionBytes = "mcp-max-description-bytes"
	FlagMaxToolNameBytes    = "mcp-max-tool-name-bytes"
	FlagListingInterval     = "mcp-listing-interval"
)

// limitRows is, for each limit, the reason of the Ready condition of an MCPServer over it and the
// flag that sets it.
var limitRows = map[mcpclient.Limit]struct{ reason, flag string }{
	mcpclient.LimitResponse:    {tg.ReasonServerResponseTooLarge, FlagMaxResponseBytes},
	mcpclient.LimitEvent:       {tg.ReasonServerEventTooLarge, FlagMaxEventBytes},
	mcpclient.LimitTools:       {tg.ReasonTooManyTools, FlagMaxTools},
	mcpclient.LimitSchema:      {tg.ReasonToolSchemaTooLarge, FlagMaxSchemaBytes},
	mcpclient.LimitDescription: {tg.ReasonToolDescriptionTooLarge, FlagMaxDescriptionBytes},
	mcpclient.LimitName:        {tg.ReasonToolNameTooLong, FlagMaxToolNameBytes},
}

// overLimit is the reason and the stable words of a limit the server went over: the limit, its
// value and the manager's setting that changes it.
func overLimit(e *mcpclient.LimitError) (reason, words string) {
	row := limitRows[e.Limit]
	return row.reason, fmt.Sprintf("%s (the manager's --%s)", e.Error(), row.flag)
}

// BindFlags registers the manager's flags that set o, starting from its defaults.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	*o = o.WithDefaults()
	l := &o.Limits
	bytes := func(name string, v *int64, what string) {
		fs.Func(name, fmt.Sprintf("Bytes the manager reads at most in %s from an MCPServer's server; one over it is reported on the MCPServer (default %d).", what, *v), func(s string) error {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("--%s is %q: give a positive number of bytes, such as %d", name, s, *v)
			}
			*v = n
			return nil
		})
	}
	count := func(name string, v *int, what string) {
		fs.Func(name, fmt.Sprintf("%s; one over it is reported on the MCPServer (default %d).", what, *v), func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n <= 0 {
				return fmt.Errorf("--%s is %q: give a positive number, such as %d", name, s, *v)
			}
			*v = n
			return nil
		})
	}
	bytes(FlagMaxResponseBytes, &l.MaxResponseBytes, "the answers of one listing (initialize and every tools/list page together)")
	bytes(FlagMaxEventBytes, &l.MaxEventBytes, "one server-sent event")
	count(FlagMaxTools, &l.MaxTools, "Tools (and tools/list pages) the manager reads at most from one MCPServer's server")
	count(FlagMaxSchemaBytes, &l.MaxSchemaBytes, "Bytes of one tool's inputSchema (as JSON) that the manager accepts")
	count(FlagMaxDescriptionBytes, &l.MaxDescriptionBytes, "Bytes of one tool's description (or title) that the manager accepts")
	count(FlagMaxToolNameBytes, &l.MaxNameBytes, "Bytes of one tool's name that the manager accepts")
	fs.Func(FlagExecutorImage, "The mcp-call image that the calls' Jobs of an MCPServer without spec.executor.image run, such as registry.example.com/toolgate/mcp-call:v0.1.0 (empty: none; such an MCPServer is reported InvalidMCPServerSpec).", func(s string) error {
		if s != "" {
			if err := CheckImage("--"+FlagExecutorImage, s); err != nil {
				return err
			}
		}
		o.ExecutorImage = s
		return nil
	})
	fs.DurationVar(&o.ListingInterval, FlagListingInterval, o.ListingInterval, "Least time between two listings of one MCPServer that its notifications/tools/list_changed ask for: however many a server sends, at most one listing per interval.")
}
