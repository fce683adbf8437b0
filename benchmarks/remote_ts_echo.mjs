// The official TypeScript SDK's remote server (@agentclientprotocol/sdk's AcpServer with
// its Node adapters, `ws` for WebSocket upgrades) serving an echo agent that answers like
// bob's echo engine: "Echo: <prompt>" in agent_message_chunk updates of at most 24
// characters cut at word boundaries, each awaited. For benchmarks/bench_remote.py.
//
// Usage: node remote_ts_echo.mjs NODE_MODULES [KEY CERT] (with a PEM key and certificate:
// HTTPS, HTTP/1.1)
// Prints "PORT <n>" on stdout once listening on a free loopback port; exits when stdin ends.
import fs from "node:fs";
import http from "node:http";
import https from "node:https";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [nodeModules, key, cert] = process.argv.slice(2);
const sdk = `${nodeModules}/@agentclientprotocol/sdk/dist`;
const load = (path) => import(pathToFileURL(`${sdk}/${path}`).href);
const { agent } = await load("v1/stable/acp.js");
const { AcpServer } = await load("transports/server.js");
const { createNodeHttpHandler, createNodeWebSocketUpgradeHandler } = await load(
  "transports/node-adapter.js",
);
const { WebSocketServer } = createRequire(`${nodeModules}/`)("ws");

function* chunks(text, size = 24) {
  let current = "";
  for (const piece of text.match(/\S+\s*|\s+/g) ?? []) {
    if (current && current.length + piece.length <= size) current += piece;
    else {
      if (current) yield current;
      current = piece;
    }
  }
  if (current) yield current;
}

function makeAgent() {
  let sessions = 0;
  return agent()
    .onRequest("initialize", () => ({ protocolVersion: 1, agentCapabilities: {} }))
    .onRequest("session/new", () => ({ sessionId: `echo-${++sessions}` }))
    .onRequest("session/prompt", async ({ params, client }) => {
      const text = "Echo: " + params.prompt.map((block) => block.text ?? "").join("");
      for (const chunk of chunks(text)) {
        await client.notify("session/update", {
          sessionId: params.sessionId,
          update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: chunk } },
        });
      }
      return { stopReason: "end_turn" };
    });
}

const server = new AcpServer({ createAgent: makeAgent });
const handle = createNodeHttpHandler(server);
const upgrade = createNodeWebSocketUpgradeHandler(server, new WebSocketServer({ noServer: true }));
const listener = (req, res) => handle(req, res);
const httpServer = key
  ? https.createServer({ key: fs.readFileSync(key), cert: fs.readFileSync(cert) }, listener)
  : http.createServer(listener);
httpServer.on("upgrade", (req, socket, head) => upgrade(req, socket, head));
httpServer.listen({ port: 0, host: "127.0.0.1", backlog: 1024 }, () => {
  console.log(`PORT ${httpServer.address().port}`);
});
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
