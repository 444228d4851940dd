package mcpservers

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	tg "toolgate.dev/toolgate/api/v1alpha1"
	"toolgate.dev/toolgate/controllers/internal/readiness"
	"toolgate.dev/toolgate/internal/mcpclient"
)

// How the manager and the calls' Jobs reach the server: the CA bundle and the headers, read from the
// Secrets that consent to serve the MCPServer.

// consents reports whether Secret s serves MCPServer srv: it carries the label toolgate.dev/mcp-server
// with srv's name.
func consents(s *corev1.Secret, srv *tg.MCPServer) bool {
	return s.Labels[tg.LabelMCPServer] == srv.Name
}

// secretValue reads key of Secret name, live (Secrets are not cached), if it consents to serve srv. A
// Secret that does not consent is answered as one that does not exist, with the same words: whoever
// writes MCPServers learns nothing of the Secrets they cannot read.
func (r *Reconciler) secretValue(ctx context.Context, srv *tg.MCPServer, name, key, what, reason string) ([]byte, error) {
	s := &corev1.Secret{}
	err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: srv.Namespace, Name: name}, s)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading Secret %s/%s: %s", srv.Namespace, name, apierrors.ReasonForError(err))
	}
	if err != nil || !consents(s, srv) {
		return nil, readiness.Stalledf(reason, "no Secret %s/%s serves MCPServer %s: create it with %s under key %q and the label %s=%s, by which a Secret consents to serve this object",
			srv.Namespace, name, srv.Name, what, key, tg.LabelMCPServer, srv.Name)
	}
	v := s.Data[key]
	if len(strings.TrimSpace(string(v))) == 0 {
		return nil, readiness.Stalledf(reason, "Secret %s/%s has no key %q, or it is empty: put %s there", srv.Namespace, name, key, what)
	}
	return v, nil
}

// settings reads what reaching the server needs: the client configuration for discovery, and the
// env that gives a call's Job the same (secretKeyRef and configMapKeyRef: the values are never copied
// into a Tool). A Stalled *readiness.Error says what to change.
func (r *Reconciler) settings(ctx context.Context, srv *tg.MCPServer) (mcpclient.Config, connection, error) {
	cfg := mcpclient.Config{URL: srv.Spec.URL, AllowInsecureHTTP: srv.Spec.AllowInsecureHTTP, Version: tg.GroupVersion.Version}
	var conn connection
	if err := cfg.Validate(); err != nil {
		return cfg, conn, readiness.Stalledf(tg.ReasonInvalidMCPServerSpec, "spec.url: %s", err.Error())
	}
	switch ref := srv.Spec.CABundleRef; {
	case len(srv.Spec.CABundle) > 0:
		cfg.CABundle = srv.Spec.CABundle
		conn.env = append(conn.env, corev1.EnvVar{Name: mcpclient.EnvCABundle, Value: literalEnv(string(srv.Spec.CABundle))})
	case ref != nil:
		key := ref.Key
		if key == "" {
			key = "ca.crt"
		}
		if ref.Kind == "ConfigMap" {
			cm := &corev1.ConfigMap{}
			if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: srv.Namespace, Name: ref.Name}, cm); err != nil {
				if !apierrors.IsNotFound(err) {
					return cfg, conn, fmt.Errorf("reading ConfigMap %s/%s: %s", srv.Namespace, ref.Name, apierrors.ReasonForError(err))
				}
				return cfg, conn, readiness.Stalledf(tg.ReasonCABundleInvalid, "spec.caBundleRef: ConfigMap %s/%s does not exist: create it with the PEM bundle under key %q", srv.Namespace, ref.Name, key)
			}
			cfg.CABundle = []byte(cm.Data[key])
			conn.env = append(conn.env, corev1.EnvVar{Name: mcpclient.EnvCABundle, ValueFrom: &corev1.EnvVarSource{
				ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: key}}})
		} else {
			v, err := r.secretValue(ctx, srv, ref.Name, key, "the PEM CA bundle", tg.ReasonCABundleInvalid)
			if err != nil {
				return cfg, conn, err
			}
			cfg.CABundle = v
			conn.env = append(conn.env, corev1.EnvVar{Name: mcpclient.EnvCABundle, ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: ref.Name}, Key: key}}})
		}
		if !x509.NewCertPool().AppendCertsFromPEM(cfg.CABundle) {
			return cfg, conn, readiness.Stalledf(tg.ReasonCABundleInvalid, "spec.caBundleRef: %s %s key %q holds no PEM certificate", ref.Kind, ref.Name, key)
		}
	}
	if len(srv.Spec.CABundle) > 0 && !x509.NewCertPool().AppendCertsFromPEM(srv.Spec.CABundle) {
		return cfg, conn, readiness.Stalledf(tg.ReasonCABundleInvalid, "spec.caBundle holds no PEM certificate: put the PEM bundle of the CAs that issued the server's certificate there")
	}
	for i, h := range srv.Spec.Headers {
		key := h.SecretKeyRef.Key
		if key == "" {
			key = "token"
		}
		v, err := r.secretValue(ctx, srv, h.SecretKeyRef.Name, key, "the value of header "+h.Name, tg.ReasonHeaderSecretUnavailable)
		if err != nil {
			return cfg, conn, err
		}
		cfg.Headers = append(cfg.Headers, mcpclient.Header{Name: h.Name, Value: string(v)})
		conn.env = append(conn.env,
			corev1.EnvVar{Name: mcpclient.EnvHeaderName(i), Value: literalEnv(h.Name)},
			corev1.EnvVar{Name: mcpclient.EnvHeaderValue(i), ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: h.SecretKeyRef.Name}, Key: key}}})
	}
	return cfg, conn, nil
}
