// @ts-check
// An agent that calls Toolgate's tools through its MCP gateway (toolgate-mcp), with the official
// TypeScript MCP SDK client. Modern JavaScript with JSDoc types: plain `node` runs it (Node 20 or
// later), and a TypeScript editor checks it as it is (@ts-check).
//
//   npm ci
//   export TOOLGATE_MCP_URL=https://toolgate-mcp.payments.svc:8090/mcp
//   export TOOLGATE_MCP_TOKEN_FILE=/var/run/secrets/toolgate-mcp/token   # or TOOLGATE_MCP_TOKEN=...
//   node agent.mjs                                            # lists the tools this agent may call
//   node agent.mjs issue_refund '{"payment_id":"payment_123","amount":4900,"currency":"GBP"}'
//
// It lists the tools, calls one and prints the gateway's progress notifications (the ToolCall's
// phase: AwaitingApproval while a human decides, then Running) on stderr. The tool's result is printed
// on stdout. A call that did not run (denied, rejected, no decision in time, ...) or failed is a tool
// error (isError): its text, the gateway's explanation, is printed on stdout and the exit code says
// which outcome it was, as `kubectl toolcall run`: 3 Failed, 4 Denied, 5 Expired, 6
// ApprovalUnavailable, 7 Cancelled, 8 Rejected; 1 for any other error. Ctrl-C (or SIGTERM) cancels the
// call (notifications/cancelled): the gateway deletes its ToolCall, so its approval request is
// withdrawn; the agent then exits 130.
//
// Environment:
//   TOOLGATE_MCP_URL         the gateway's endpoint (required)
//   TOOLGATE_MCP_TOKEN       a ServiceAccount token issued for the gateway's audience, or
//   TOOLGATE_MCP_TOKEN_FILE  a file holding one (read again for every request: projected tokens rotate)
//   TOOLGATE_WAITING_LIMIT   how long to wait in total for a call, a duration such as 30m (default 10m)
//   NODE_EXTRA_CA_CERTS      Node's own: a PEM file of the CA that signed the gateway's certificate

import { readFileSync } from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

/** Exit code per phase of a call that did not succeed, as `kubectl toolcall run` (docs/cli.md). */
const EXIT_CODES = { Failed: 3, Denied: 4, Expired: 5, ApprovalUnavailable: 6, Cancelled: 7, Rejected: 8 };
const EXIT_ERROR = 1;
const EXIT_INTERRUPTED = 130;

/**
 * Milliseconds in a duration such as 90s, 10m or 1h30m.
 * @param {string} text
 * @returns {number}
 */
function milliseconds(text) {
  const units = { h: 3_600_000, m: 60_000, s: 1_000, ms: 1 };
  if (!/^(\d+(\.\d+)?(h|m|s|ms))+$/.test(text)) {
    throw new Error(`TOOLGATE_WAITING_LIMIT is ${JSON.stringify(text)}: give a duration such as 90s, 10m or 1h30m`);
  }
  let ms = 0;
  for (const [, n, , unit] of text.matchAll(/(\d+(\.\d+)?)(ms|h|m|s)/g)) {
    ms += Number(n) * units[/** @type {keyof typeof units} */ (unit)];
  }
  return ms;
}

/**
 * The gateway authenticates every request with a bearer token: a ServiceAccount token issued for
 * its audience. A token file is read again for each request.
 * @returns {() => string}
 */
function tokenSource() {
  const { TOOLGATE_MCP_TOKEN: token, TOOLGATE_MCP_TOKEN_FILE: file } = process.env;
  if (token) return () => token;
  if (file) return () => readFileSync(file, 'utf8').trim();
  throw new Error(
    'set TOOLGATE_MCP_TOKEN or TOOLGATE_MCP_TOKEN_FILE to a ServiceAccount token for the gateway\'s audience ' +
      '(kubectl -n NAMESPACE create token SERVICEACCOUNT --audience GATEWAY_URL)',
  );
}

/**
 * The text of a tools/call result: its text content blocks.
 * @param {Record<string, unknown>} result
 * @returns {string}
 */
function textOf(result) {
  const content = Array.isArray(result.content) ? result.content : [];
  return content
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

/**
 * @param {string[]} argv
 * @returns {Promise<number>} the exit code
 */
async function main(argv) {
  const url = process.env.TOOLGATE_MCP_URL;
  if (!url) throw new Error('set TOOLGATE_MCP_URL to the gateway\'s endpoint, e.g. http://127.0.0.1:8090/mcp');
  const [tool, argsJSON = '{}'] = argv;
  const waitingLimit = process.env.TOOLGATE_WAITING_LIMIT || '10m';
  const limitMs = milliseconds(waitingLimit);
  const token = tokenSource();

  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: (input, init) => {
      const headers = new Headers(init?.headers);
      headers.set('Authorization', `Bearer ${token()}`);
      return fetch(input, { ...init, headers });
    },
  });
  const client = new Client({ name: 'toolgate-example-agent', version: '1.0.0' });
  // A 401 (no valid token for the gateway's audience) or 403 (this caller may call no tool here)
  // fails here, with the gateway's answer in the message.
  await client.connect(transport);
  try {
    // Only the tools this caller may call are listed (RBAC verb call on tools, per toolName).
    const { tools } = await client.listTools();
    for (const t of tools) console.log(`tool ${t.name}: ${t.description ?? ''}`);
    if (!tool) return 0;

    let args;
    try {
      args = JSON.parse(argsJSON);
    } catch (err) {
      throw new Error(`the arguments are not JSON: ${err instanceof Error ? err.message : err}`);
    }
    if (args === null || typeof args !== 'object' || Array.isArray(args)) {
      throw new Error('the arguments must be a JSON object, e.g. \'{}\' for none');
    }

    // Ctrl-C cancels the call: the SDK sends notifications/cancelled, and the gateway withdraws the
    // ToolCall (its approval request is cancelled at the provider).
    const abort = new AbortController();
    const interrupt = () => abort.abort(new Error('interrupted'));
    process.once('SIGINT', interrupt);
    process.once('SIGTERM', interrupt);

    console.log(`calling ${tool}: a human approves it first; waiting at most ${waitingLimit}`);
    let result;
    try {
      result = await client.callTool(
        // The gateway takes the call's waiting limit (spec.waitingLimit) from _meta.
        { name: tool, arguments: args, _meta: { 'toolgate.dev/waitingLimit': waitingLimit } },
        undefined,
        {
          // Asking for progress: one notification per new phase of the ToolCall.
          onprogress: (p) => console.error(`progress: ${p.message ?? p.progress}`),
          signal: abort.signal,
          // The SDK gives up on a request after 60 s by default, and giving up cancels the call.
          // A human may take minutes: wait as long as the call may last, plus a minute.
          timeout: limitMs + 60_000,
        },
      );
    } catch (err) {
      if (abort.signal.aborted) {
        // The SDK sent notifications/cancelled without waiting for it to arrive, and exiting could
        // cut it off: ending the session (HTTP DELETE), which the SDK does wait for, makes sure the
        // gateway abandons the call.
        await transport.terminateSession().catch(() => {});
        console.error('interrupted: the call was cancelled; the gateway withdraws its ToolCall and approval request');
        return EXIT_INTERRUPTED;
      }
      throw err; // a protocol error: unknown tool, the gateway unreachable, ...
    }

    // The gateway names the ToolCall and its phase in the result's _meta, for audit.
    const meta = /** @type {Record<string, unknown>} */ (result._meta ?? {});
    const phase = String(meta['toolgate.dev/phase'] ?? '');
    if (result.isError) {
      // Not an exception: the explanation is for the model to read and act on (fix the arguments,
      // try later, tell the user a human said no).
      console.log(`the call did not succeed (${phase || 'no ToolCall'}):\n${textOf(result)}`);
      return EXIT_CODES[/** @type {keyof typeof EXIT_CODES} */ (phase)] ?? EXIT_ERROR;
    }
    console.log(`ToolCall ${meta['toolgate.dev/toolCall']}: ${phase}`);
    console.log(`result: ${textOf(result)}`);
    return 0;
  } finally {
    await client.close();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err) => {
    console.error(`agent.mjs: ${err instanceof Error ? err.message : err}`);
    process.exit(EXIT_ERROR);
  },
);
