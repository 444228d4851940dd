//go:build tools

// Package tools pins the cosign command line that the e2e suite (test/e2e) verifies Toolgate's signed
// receipts with, as a user would: `cosign verify-blob-attestation` against the manager's public key
// (docs/receipts-cosign.md). The suite builds it once into $TOOLGATE_CACHE/tools/cosign-<version>
// (default ~/.cache/toolgate), outside the checkout. A module of its own, so that cosign's many
// dependencies never move the project's.
package tools

import _ "github.com/sigstore/cosign/v2/cmd/cosign"
