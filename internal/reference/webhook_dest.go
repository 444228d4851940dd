package reference

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// Receiver destinations. A receiver must be a public address: the provider refuses loopback,
// private (RFC 1918, unique local), link-local, unspecified, multicast, shared, documentation and
// cloud metadata addresses, unless Options.AllowedWebhookNetworks permits them (for local clusters
// and tests). The check runs when a configuration is submitted, on every address the host resolves
// to, and again on the address of every connection (verification and each delivery attempt), in the
// dialer, so that a DNS answer that changes after the first check cannot reach a refused address.
// Redirects are never followed.

// blockedNetworks are the non-public ranges refused as receiver addresses.
var blockedNetworks = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001:db8::/32", "2002::/16",
		"fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

// metadataAddrs are the cloud metadata services' addresses (also inside blockedNetworks; named for
// the error message).
var metadataAddrs = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

var errForbiddenDestination = errors.New("receiver address is not a public address")

// destinationAllowed reports whether a receiver may be reached at addr, and if not why.
func (s *Server) destinationAllowed(addr netip.Addr) error {
	addr = addr.Unmap()
	for _, p := range s.opts.AllowedWebhookNetworks {
		if p.Contains(addr) {
			return nil
		}
	}
	for _, m := range metadataAddrs {
		if addr == m {
			return fmt.Errorf("%w: %s is a cloud metadata address", errForbiddenDestination, addr)
		}
	}
	if !addr.IsValid() || addr.Zone() != "" {
		return fmt.Errorf("%w: %s", errForbiddenDestination, addr)
	}
	for _, p := range blockedNetworks {
		if p.Contains(addr) {
			return fmt.Errorf("%w: %s is in %s (loopback, private, link-local or otherwise non-public)", errForbiddenDestination, addr, p)
		}
	}
	return nil
}

// checkDestination resolves a receiver URL's host and refuses it (errForbiddenDestination) if any of
// its addresses may not be reached. Other errors (the host does not resolve) are returned as they are.
func (s *Server) checkDestination(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ctx, cancel := context.WithTimeout(ctx, s.opts.WebhookTimeout)
		defer cancel()
		if addrs, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return fmt.Errorf("resolving %s: %w", host, err)
		}
	}
	for _, a := range addrs {
		if err := s.destinationAllowed(a); err != nil {
			return err
		}
	}
	return nil
}

// controlDial refuses a connection to an address that may not be reached; it runs on the address
// actually dialled, after resolution.
func (s *Server) controlDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot read %q", errForbiddenDestination, address)
	}
	return s.destinationAllowed(ap.Addr())
}

// maxWebhookResponse bounds what the provider reads of a receiver's answer.
const maxWebhookResponse = 64 << 10

// newWebhookClient returns the client that reaches receivers: addresses checked on every connection,
// Options.WebhookRootCAs (or the system roots) for TLS, no proxy, no redirects followed, and at most
// Options.WebhookTimeout per exchange.
func (s *Server) newWebhookClient() *http.Client {
	dialer := &net.Dialer{Timeout: s.opts.WebhookTimeout, Control: s.controlDial}
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           dialer.DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: s.opts.WebhookRootCAs, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   s.opts.WebhookTimeout,
			ResponseHeaderTimeout: s.opts.WebhookTimeout,
			// As many kept as may be in flight to one receiver: a burst of notifications reuses
			// connections instead of opening (and handshaking) new ones.
			MaxIdleConnsPerHost: maxWebhookHostConcurrency,
			IdleConnTimeout:     90 * time.Second,
		},
		Timeout: s.opts.WebhookTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect is the answer, and not a 2xx
		},
	}
}
