// examples/mcp.ts: an MCP server whose tools Interlock judges, and a client whose calls it
// judges before they are sent. A refusal is an `isError: true` result on either side.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { InterlockClient } from "interlock-guard";
import { guardClient, guardMcpServer } from "interlock-guard/mcp";

export async function main(env: { INTERLOCK_URL: string; INTERLOCK_KEY: string }) {
  const interlock = new InterlockClient({ url: env.INTERLOCK_URL, apiKey: env.INTERLOCK_KEY });

  // Server side: every tool registered after guardMcpServer is judged.
  const server = guardMcpServer(new McpServer({ name: "tools", version: "1.0.0" }), { client: interlock });
  server.registerTool(
    "shell",
    { description: "Run a shell command", inputSchema: { command: z.string() } },
    async ({ command }) => ({ content: [{ type: "text", text: `ran ${command}` }] }),
  );

  // Client side: a refused call is never sent.
  const client = guardClient(new Client({ name: "agent", version: "1.0.0" }), { client: interlock });

  const [clientTransport, serverTransport] = InMemoryTransport.createLinkedPair();
  await server.connect(serverTransport);
  await client.connect(clientTransport);

  const listing = await client.callTool({ name: "shell", arguments: { command: "ls" } });
  const refused = await client.callTool({ name: "shell", arguments: { command: "rm -rf /" } });
  // refused.isError === true; refused.content[0].text says why;
  // refused._meta["interlock/decision"] holds the decision id, verdict and rule ids.

  await client.close();
  await server.close();
  return { listing, refused };
}
