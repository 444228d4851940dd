package main

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"os"
	"strings"
)

// parseNetworks reads --allow-webhook-networks: comma-separated CIDR prefixes ("" for none).
func parseNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, field := range strings.Split(list, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			continue
		}
		p, err := netip.ParsePrefix(field)
		if err != nil {
			return nil, fmt.Errorf("--allow-webhook-networks: %q is not a CIDR prefix such as 10.0.0.0/8 or fd00::/8", field)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// readCAFile reads --webhook-ca-file: PEM certificates that receivers' certificates must chain to
// ("" for the system roots).
func readCAFile(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--webhook-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("--webhook-ca-file: %s holds no PEM certificate", path)
	}
	return pool, nil
}
