#!/usr/bin/env bash
# Installs what the test suite needs beyond Go and make: Debian's Chromium at /usr/bin/chromium, which
# the approval page's browser tests (internal/provider/reference/ui_test.go) drive headless. It does
# nothing when Chromium is already there, so it is safe to run before every test run. Needs root
# (apt-get) the first time.
set -euo pipefail

if [[ -x /usr/bin/chromium ]]; then
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "hack/install-test-deps.sh: /usr/bin/chromium is missing and apt-get is not available;" \
    "install Chromium so that /usr/bin/chromium exists" >&2
  exit 1
fi

# Quiet on success; on failure, apt-get's whole output is shown.
log="$(mktemp)"
trap 'rm -f "${log}"' EXIT
echo "hack/install-test-deps.sh: installing chromium" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"${log}" 2>&1; then
  cat "${log}" >&2
  echo "hack/install-test-deps.sh: installing chromium failed" >&2
  exit 1
fi
[[ -x /usr/bin/chromium ]] || {
  echo "hack/install-test-deps.sh: apt-get installed chromium but /usr/bin/chromium does not exist" >&2
  exit 1
}
