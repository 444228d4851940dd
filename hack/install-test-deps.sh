#!/usr/bin/env bash
# Installs what the test suite needs beyond Go and make:
#  - Debian's Chromium at /usr/bin/chromium, which the approval page's browser tests
#    (internal/reference/ui_test.go) drive headless. Needs root (apt-get) the first time.
#  - the official TypeScript MCP SDK client, at the version pinned by test/mcpagent/ts/package-lock.json,
#    into ${TOOLGATE_NPM_DIR:-~/.cache/toolgate/npm}/mcpagent (outside the checkout), which the MCP
#    gateway's tests (internal/mcpgateway) run as an agent, and test/examples runs
#    examples/typescript-mcp with (its lock file holds the same packages). Needs Node 20 or later and npm.
#  - the official reference MCP server @modelcontextprotocol/server-everything, at the version pinned by
#    test/mcpeverything/package-lock.json, into ${TOOLGATE_NPM_DIR:-~/.cache/toolgate/npm}/mcpeverything,
#    which the MCPServer controller's and mcp-call's tests run over streamable HTTP.
# It does nothing for what is already installed, so it is safe to run before every test run.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# npm_install <source dir with package.json and package-lock.json> <name under the npm dir> <what>
npm_install() {
  local src="$1"
  local dest="${TOOLGATE_NPM_DIR:-${HOME}/.cache/toolgate/npm}/$2"
  local what="$3"
  if [[ -d "${dest}/node_modules" ]] && cmp -s "${src}/package-lock.json" "${dest}/package-lock.json"; then
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    echo "hack/install-test-deps.sh: npm is missing; install Node.js 20 or later with npm" \
      "(apt-get install -y nodejs npm) to install ${what} for the tests" >&2
    return 1
  fi
  echo "hack/install-test-deps.sh: installing ${what} into ${dest}" >&2
  mkdir -p "${dest}"
  cp "${src}/package.json" "${src}/package-lock.json" "${dest}/"
  local log
  log="$(mktemp)"
  if ! (cd "${dest}" && npm ci --no-audit --no-fund --ignore-scripts) >"${log}" 2>&1; then
    cat "${log}" >&2
    rm -f "${log}" "${dest}/package-lock.json"
    echo "hack/install-test-deps.sh: npm ci in ${dest} failed" >&2
    return 1
  fi
  rm -f "${log}"
}

npm_install "${root}/test/mcpagent/ts" mcpagent "the TypeScript MCP SDK"
npm_install "${root}/test/mcpeverything" mcpeverything "the reference MCP server (server-everything)"

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
