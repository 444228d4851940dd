package providercache

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
)

// CertificateProblem returns the certificate verification error behind a failed call, "" when the
// call did not fail on the provider's TLS certificate. The text is the same on every attempt (an
// expiry is not quoted with the current time), so a status that quotes it is not rewritten on retries.
func CertificateProblem(err error) string {
	var verify *tls.CertificateVerificationError
	if !errors.As(err, &verify) || verify.Err == nil {
		return ""
	}
	var invalid x509.CertificateInvalidError
	if errors.As(verify.Err, &invalid) && invalid.Reason == x509.Expired {
		return "x509: certificate has expired or is not yet valid"
	}
	return verify.Err.Error()
}
