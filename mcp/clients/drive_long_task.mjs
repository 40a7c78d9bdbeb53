// Drives `long_task(n, delay_ms)` with the official TypeScript MCP SDK and prints one JSON line.
//
// usage: node drive_long_task.mjs URL N DELAY_MS TIMEOUT_MS [LINGER_MS]
//
// The SDK's StreamableHTTPClientTransport reconnects by itself (GET + Last-Event-ID) when a stream
// breaks. Output: progress (values delivered to onprogress, in order), result (structured result
// or null), error (the call's failure), transportErrors (what the transport reported), tokens
// (resumption tokens the transport recorded, i.e. SSE ids it saw). With LINGER_MS the client stays
// connected that long after the call settled, so what its transport does next (reconnects) shows.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, n, delayMs, timeoutMs, lingerMs] = process.argv.slice(2);
const out = { progress: [], result: null, error: null, transportErrors: [], tokens: [] };

const transport = new StreamableHTTPClientTransport(new URL(url), {
  // Fast retries for tests; the server's `retry:` field overrides the delay anyway.
  reconnectionOptions: {
    initialReconnectionDelay: 100,
    maxReconnectionDelay: 1000,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 2,
  },
});
const client = new Client({ name: 'replay-ring-e2e', version: '0.0.0' });
client.onerror = (e) => out.transportErrors.push(String(e));

try {
  await client.connect(transport);
  const res = await client.callTool(
    { name: 'long_task', arguments: { n: Number(n), delay_ms: Number(delayMs) } },
    undefined,
    {
      onprogress: (p) => out.progress.push(p.progress),
      onresumptiontoken: (t) => out.tokens.push(t),
      timeout: Number(timeoutMs),
      resetTimeoutOnProgress: false,
    },
  );
  out.result = res.structuredContent ?? null;
  out.isError = res.isError ?? false;
} catch (e) {
  out.error = String(e);
}
if (lingerMs) {
  await new Promise((resolve) => setTimeout(resolve, Number(lingerMs)));
}
console.log(JSON.stringify(out));
process.exit(0);
