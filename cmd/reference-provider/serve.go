package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"toolgate.dev/toolgate/internal/reference"
)

// serveFlags is the command line of serve.
type serveFlags struct {
	listen, db, profile                                   string
	credentialFile, provisionerFile, adminCredentialFile  string
	approversFile, allowNetworks, webhookCAFile           string
	tlsCert, tlsKey                                       string
	http2                                                 bool
	quorum                                                int
	minTimeout, maxTimeout, credentialLifetime, maxWindow time.Duration
	retention, validity                                   time.Duration
	zap                                                   zap.Options
}

func serve(args []string) error {
	f, err := parseServeFlags(args)
	if err != nil {
		return err
	}
	opts, err := f.options()
	if err != nil {
		return err
	}
	srv, err := reference.New(opts)
	if err != nil {
		return err
	}
	return serveUntilSignalled(srv, f)
}

// parseServeFlags reads serve's command line.
func parseServeFlags(args []string) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8085", "address to listen on")
	fs.StringVar(&f.db, "db", "reference-provider.db", "bbolt file holding requests and idempotency keys")
	fs.StringVar(&f.credentialFile, "credential-file", "", "file holding a static instance credential, bound to the built-in default instance (required unless --provisioner-token-file is given)")
	fs.StringVar(&f.provisionerFile, "provisioner-token-file", "", "file holding the provisioner token, which creates, reads, updates and deletes instances (POST /v1/instances ...), each with its own credential; it cannot make approval requests")
	fs.StringVar(&f.adminCredentialFile, "admin-credential-file", "", "file holding the bearer credential of the admin API and the approval page (required): it decides every request, so it differs from the instance credential and the provisioner token")
	fs.StringVar(&f.approversFile, "approvers-file", "", "file with one approver per line, \"NAME CREDENTIAL [instances=ID,ID...]\": each signs in to the approval page and decides (decide, list) with their own credential, and their decisions record their name (the admin credential records \"admin\"); with instances= they see and decide only the requests of the instances of those ids and of those the admin grants them (PUT /admin/v1/approvers/NAME/instances/ID); instances= alone starts them with none")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate file; with --tls-key, serve HTTPS")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key file")
	fs.BoolVar(&f.http2, "http2", false, "with --tls-cert, offer HTTP/2 as well as HTTP/1.1: many long polls then share one connection")
	fs.DurationVar(&f.minTimeout, "min-timeout", time.Second, "smallest timeout a submission may request")
	fs.DurationVar(&f.maxTimeout, "max-timeout", 24*time.Hour, "largest timeout a submission may request")
	fs.DurationVar(&f.credentialLifetime, "credential-lifetime", 0, "how long an instance credential issued by provisioning is valid, given as its expires_at (0: credentials do not expire)")
	fs.DurationVar(&f.maxWindow, "max-window", 0, "longest approval window granted: a request asking for a longer timeout gets deadline_at = created_at + this (0: as long as the timeout asks)")
	fs.DurationVar(&f.retention, "retention", reference.MinRetention, "how long terminal requests and their idempotency keys are kept after decided_at (at least 168h)")
	fs.DurationVar(&f.validity, "approval-validity", 5*time.Minute, "how long an approval is valid unless the decision says")
	fs.IntVar(&f.quorum, "quorum", 1, "how many distinct approvers must approve a request (through the page or the admin API) before it is approved, unless its instance has its own (PUT /admin/v1/instances/ID/quorum); any deny decides at once, and the requester (context.requester.username) never approves their own call; 1 to 32")
	fs.StringVar(&f.allowNetworks, "allow-webhook-networks", "", "comma-separated CIDR prefixes where webhook receivers may be although not public, e.g. 10.0.0.0/8,127.0.0.0/8 for a local cluster (default: only public addresses)")
	fs.StringVar(&f.webhookCAFile, "webhook-ca-file", "", "PEM file of the CA certificates webhook receivers' certificates must chain to (default: the system roots)")
	fs.StringVar(&f.profile, "profile", string(reference.ProfileFull), "how the AAP API answers: full (ErrorResponse bodies, agent_reasoning and context echoed) or seed (the fewest fields AAP allows, plain-text errors)")
	// One line per state change, on stderr, with the manager's --zap-* flags (JSON at info by default).
	f.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	return f, nil
}

// check refuses flags that cannot go together or a required one that is missing.
func (f *serveFlags) check() error {
	switch {
	case (f.tlsCert == "") != (f.tlsKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case f.http2 && f.tlsCert == "":
		return errors.New("--http2 needs --tls-cert and --tls-key: HTTP/2 is offered only over TLS")
	case f.credentialFile == "" && f.provisionerFile == "":
		return errors.New("--credential-file is required (or --provisioner-token-file)")
	case f.quorum < 1 || f.quorum > reference.MaxQuorum:
		return fmt.Errorf("--quorum %d: give the number of distinct approvers a request needs, from 1 to %d", f.quorum, reference.MaxQuorum)
	case f.adminCredentialFile == "":
		return errors.New("--admin-credential-file is required: the admin API and the approval page decide every request, so they take a credential of their own, not the instance credential")
	}
	return nil
}

// options checks the flags and reads the files they name into the provider's options.
func (f *serveFlags) options() (reference.Options, error) {
	profile, err := reference.ParseProfile(f.profile)
	if err != nil {
		return reference.Options{}, fmt.Errorf("--profile: %w", err)
	}
	if err := f.check(); err != nil {
		return reference.Options{}, err
	}
	o := reference.Options{
		DBPath:                  f.db,
		MaxWindow:               f.maxWindow,
		CredentialLifetime:      f.credentialLifetime,
		Retention:               f.retention,
		MinTimeout:              f.minTimeout,
		MaxTimeout:              f.maxTimeout,
		DefaultApprovalValidity: f.validity,
		HTTP2:                   f.http2,
		Quorum:                  f.quorum,
		Profile:                 profile,
	}
	if err := f.readFiles(&o); err != nil {
		return reference.Options{}, err
	}
	o.Logger = zap.New(zap.UseFlagOptions(&f.zap))
	return o, nil
}

// readFiles reads the credentials, the approvers, the webhook networks and CAs the flags name into o.
func (f *serveFlags) readFiles(o *reference.Options) error {
	var err error
	if o.Credential, err = readOptionalCredential("--credential-file", f.credentialFile); err != nil {
		return err
	}
	if o.ProvisionerToken, err = readOptionalCredential("--provisioner-token-file", f.provisionerFile); err != nil {
		return err
	}
	if o.AdminCredential, err = readOptionalCredential("--admin-credential-file", f.adminCredentialFile); err != nil {
		return err
	}
	if o.Approvers, o.ApproverInstances, err = readApprovers(f.approversFile); err != nil {
		return err
	}
	if o.AllowedWebhookNetworks, err = parseNetworks(f.allowNetworks); err != nil {
		return err
	}
	o.WebhookRootCAs, err = readCAFile(f.webhookCAFile)
	return err
}

// serveUntilSignalled serves srv on --listen until SIGINT or SIGTERM, then closes it.
func serveUntilSignalled(srv *reference.Server, f *serveFlags) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	baseURL, err := start(srv, f.listen, f.tlsCert, f.tlsKey)
	if err != nil {
		return errors.Join(err, srv.Close())
	}
	// The admin credential itself is never printed: the line names the file that holds it.
	fmt.Printf("approval page: %s/ui/ (sign in with the admin credential in %s)\n", baseURL, f.adminCredentialFile)
	<-ctx.Done()
	return srv.Close()
}

// start serves plain HTTP, or HTTPS when a certificate is given, and returns the base URL.
func start(srv *reference.Server, listen, certFile, keyFile string) (string, error) {
	if certFile == "" {
		return srv.Start(listen)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", fmt.Errorf("loading the TLS key pair: %w", err)
	}
	return srv.StartTLS(listen, cert)
}
