// Command reference-provider runs the reference approvals provider and decides its requests.
//
//	reference-provider serve  --listen 127.0.0.1:8085 --db reference-provider.db --admin-credential-file admin --credential-file cred [--provisioner-token-file token] [--approvers-file approvers] [--quorum 2] [--profile full|seed] [--max-window 1h] [--credential-lifetime 720h] [--tls-cert crt --tls-key key [--http2]]
//	                          [--allow-webhook-networks 10.0.0.0/8,127.0.0.0/8] [--webhook-ca-file ca.pem]
//	                          [--zap-log-level info] [--zap-encoder json|console] (the manager's log flags; logs go to stderr)
//	reference-provider list   --url http://127.0.0.1:8085 --credential-file admin [--status pending]
//	reference-provider decide --url http://127.0.0.1:8085 --credential-file admin --id ID --approve|--deny [--note text] [--valid-for 5m]
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"toolgate.dev/toolgate/internal/provider"
	"toolgate.dev/toolgate/internal/reference"
)

const usage = `usage: reference-provider <command> [flags]

commands:
  serve   run the provider
  list    list requests (pending by default)
  decide  approve or deny a pending request

Run "reference-provider <command> -h" for the flags of a command.
`

// maxResponseBytes bounds what the admin commands read from the provider.
const maxResponseBytes = 16 << 20

func main() {
	err := run(os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "reference-provider:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "serve":
		return serve(args[1:])
	case "list":
		return list(args[1:], stdout)
	case "decide":
		return decide(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func list(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	conn := connectionFlags(fs)
	status := fs.String("status", provider.StatusPending, `requests to list by status; "" for all`)
	instance := fs.String("instance", "", "list only the requests of this instance id (default: every instance's)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	query := url.Values{"status": {*status}}
	if *instance != "" {
		query.Set("instance", *instance)
	}
	var reqs []reference.AdminRequest
	if err := c.call(http.MethodGet, "/admin/v1/requests?"+query.Encode(), nil, &reqs); err != nil {
		return err
	}
	return printTable(stdout, reqs)
}

func printTable(w io.Writer, reqs []reference.AdminRequest) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tINSTANCE\tDEADLINE\tARGUMENTS")
	for _, r := range reqs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Tool, r.Status, r.InstanceName, r.DeadlineAt.Format(time.RFC3339), r.Arguments)
	}
	return tw.Flush()
}

func decide(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("decide", flag.ContinueOnError)
	conn := connectionFlags(fs)
	id := fs.String("id", "", "id of the request to decide (required)")
	approve := fs.Bool("approve", false, "approve the request")
	deny := fs.Bool("deny", false, "deny the request")
	note := fs.String("note", "", "note for the agent and the audit trail")
	validFor := fs.String("valid-for", "", "how long an approval is valid (default: the provider's)")
	expiresAt := fs.String("expires-at", "", "RFC 3339 time an approval stops being valid; overrides --valid-for")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" || *approve == *deny {
		return errors.New("decide needs --id and exactly one of --approve and --deny")
	}
	body := map[string]string{"status": provider.StatusDenied, "note": *note}
	if *approve {
		body["status"] = provider.StatusApproved
		body["valid_for"] = *validFor
		body["expires_at"] = *expiresAt
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	var req reference.AdminRequest
	if err := c.call(http.MethodPost, "/admin/v1/requests/"+url.PathEscape(*id)+"/decide", dropEmpty(body), &req); err != nil {
		return err
	}
	out, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, string(out))
	return err
}

func dropEmpty(m map[string]string) map[string]string {
	for k, v := range m {
		if v == "" {
			delete(m, k)
		}
	}
	return m
}

type connection struct {
	url, credentialFile, caFile *string
}

func connectionFlags(fs *flag.FlagSet) connection {
	return connection{
		url:            fs.String("url", "http://127.0.0.1:8085", "base URL of the provider"),
		credentialFile: fs.String("credential-file", "", "file holding the admin bearer credential (required)"),
		caFile:         fs.String("ca-file", "", "PEM file of the CA that signed the provider's certificate (default: system roots)"),
	}
}

// adminClient calls the provider's admin API.
type adminClient struct {
	base, credential string
	http             *http.Client
}

func (c connection) client() (*adminClient, error) {
	credential, err := readCredential(*c.credentialFile)
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if *c.caFile != "" {
		pem, err := os.ReadFile(*c.caFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", *c.caFile)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &adminClient{
		base:       strings.TrimSuffix(*c.url, "/"),
		credential: credential,
		http:       &http.Client{Transport: transport, Timeout: 30 * time.Second},
	}, nil
}

// call sends body (if any) as JSON and decodes a 2xx response into out, or returns the error response.
func (c *adminClient) call(method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, c.base+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.credential)
	req.Header.Set("Content-Type", provider.ContentTypeJSON)
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e provider.ErrorResponse
		if json.Unmarshal(data, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("%s %s: %s: %s", method, path, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	return json.Unmarshal(data, out)
}

// instancesPrefix starts the optional third field of an --approvers-file line.
const instancesPrefix = "instances="

// readApprovers reads --approvers-file: "NAME CREDENTIAL" per line, optionally followed by
// "instances=ID,ID...", the ids of the instances whose requests the approver sees and decides besides
// those the admin grants them ("instances=" alone: none to start with); blank lines and lines starting
// with # are skipped. No file, no approvers.
func readApprovers(path string) (map[string]string, map[string][]string, error) {
	if path == "" {
		return nil, nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading --approvers-file: %w", err)
	}
	out, scopes := map[string]string{}, map[string][]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		scoped := len(fields) == 3 && strings.HasPrefix(fields[2], instancesPrefix)
		if len(fields) != 2 && !scoped {
			return nil, nil, fmt.Errorf("%s line %d: want \"NAME CREDENTIAL\" or \"NAME CREDENTIAL instances=ID,ID...\", got %d fields", path, i+1, len(fields))
		}
		if _, dup := out[fields[0]]; dup {
			return nil, nil, fmt.Errorf("%s line %d: approver %s is listed twice", path, i+1, fields[0])
		}
		out[fields[0]] = fields[1]
		if scoped {
			scopes[fields[0]] = []string{}
			if ids := strings.TrimPrefix(fields[2], instancesPrefix); ids != "" {
				scopes[fields[0]] = strings.Split(ids, ",")
			}
		}
	}
	return out, scopes, nil
}

// readOptionalCredential reads the credential a flag names, if it names one.
func readOptionalCredential(flag, path string) (string, error) {
	if path == "" {
		return "", nil
	}
	credential, err := readCredential(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flag, err)
	}
	return credential, nil
}

func readCredential(path string) (string, error) {
	if path == "" {
		return "", errors.New("--credential-file is required")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the credential: %w", err)
	}
	credential := strings.TrimSpace(string(data))
	if credential == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return credential, nil
}
