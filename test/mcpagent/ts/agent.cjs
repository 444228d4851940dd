// An agent built on the official TypeScript MCP SDK client, for the MCP gateway's tests. It connects
// to the gateway's streamable HTTP endpoint, lists the tools, starts one tools/call and then obeys its
// stdin, one command a line:
//   close      calls client.close() without cancelling the call first
//   terminate  ends the session (HTTP DELETE) without cancelling the call first
// It reports on stdout: "listed <names>", "calling", "closed", "terminated", "result <json>",
// "error <message>". It never exits by itself while stdin is open, so that a test can tell what the
// SDK did from what the process's exit did.
//
// Usage: node agent.cjs <url> <tool> <arguments JSON>
// The SDK is loaded from $TOOLGATE_MCP_SDK_DIR (hack/install-test-deps.sh installs it there). When
// $TOOLGATE_MCP_TOKEN is set, every request carries it as a bearer token.
'use strict';
const path = require('node:path');
const readline = require('node:readline');
const { createRequire } = require('node:module');

const sdk = createRequire(path.join(process.env.TOOLGATE_MCP_SDK_DIR, 'package.json'));
const { Client } = sdk('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = sdk('@modelcontextprotocol/sdk/client/streamableHttp.js');

const [url, tool, args] = process.argv.slice(2);

async function main() {
  const client = new Client({ name: 'toolgate-test-ts-agent', version: '1.0.0' });
  const token = process.env.TOOLGATE_MCP_TOKEN;
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: token ? { headers: { Authorization: 'Bearer ' + token } } : undefined,
  });
  await client.connect(transport);
  const { tools } = await client.listTools();
  console.log('listed ' + tools.map((t) => t.name).join(','));

  // A human may take minutes: the SDK's default request timeout (60 s) would cancel the call itself.
  client
    .callTool({ name: tool, arguments: JSON.parse(args) }, undefined, { timeout: 30 * 60 * 1000 })
    .then((res) => console.log('result ' + JSON.stringify(res)))
    .catch((err) => console.log('error ' + err.message));
  console.log('calling');

  for await (const line of readline.createInterface({ input: process.stdin })) {
    switch (line.trim()) {
      case 'close':
        await client.close();
        console.log('closed');
        break;
      case 'terminate':
        await transport.terminateSession();
        console.log('terminated');
        break;
    }
  }
}

main().catch((err) => {
  console.log('error ' + (err && err.stack ? err.stack : err));
  process.exitCode = 1;
});
