// A small ACP client on the official TypeScript SDK's client side (@agentclientprotocol/sdk),
// for tests/acp.rs. It starts the agent command given as its arguments, initializes, then
// does what JSON lines on its stdin say and prints everything it receives as JSON lines:
//
//   {"op":"request","tag":"p1","method":"session/prompt","params":{...}}  -> {"kind":"response"|"error","tag":"p1",...}
//   {"op":"notify","method":"session/cancel","params":{...}}
//   {"op":"answers","list":["once","deny"]}   answers for the next permission requests
//   {"op":"close"}                            close the agent's stdin and wait for it to exit
//
// Updates come out as {"kind":"update","params":...}, permission requests as
// {"kind":"permission","params":...}, the agent's exit as {"kind":"agent_exit","code":N}.
// The SDK is found through TALARIA_ACP_SDK (its package directory).

import { spawn } from "node:child_process";
import { join } from "node:path";
import readline from "node:readline";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const sdkDir = process.env.TALARIA_ACP_SDK;
if (!sdkDir) {
  console.error("TALARIA_ACP_SDK is not set");
  process.exit(2);
}
const acp = await import(pathToFileURL(join(sdkDir, "dist/v1/stable/acp.js")).href);

const out = (value) => process.stdout.write(JSON.stringify(value) + "\n");
const errorOf = (e) => ({ code: e?.code, message: e?.message ?? String(e), data: e?.data });

const [command, ...args] = process.argv.slice(2);
const agent = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
// The agent's exit is reported at once: the SDK then closes the connection, which rejects
// what was still pending, and that is expected here.
agent.on("exit", (code, signal) => {
  out({ kind: "agent_exit", code: code ?? signal });
  process.exit(0);
});
process.on("unhandledRejection", () => {});
const stream = acp.ndJsonStream(Writable.toWeb(agent.stdin), Readable.toWeb(agent.stdout));

const answers = [];
const app = acp
  .client({ name: "talaria-acp-test" })
  .onNotification("session/update", (cx) => out({ kind: "update", params: cx.params }))
  .onRequest("session/request_permission", (cx) => {
    out({ kind: "permission", params: cx.params });
    const answer = answers.shift() ?? "cancel";
    return answer === "cancel"
      ? { outcome: { outcome: "cancelled" } }
      : { outcome: { outcome: "selected", optionId: answer } };
  });

async function drive(cx) {
  const init = await cx.request("initialize", { protocolVersion: 1, clientCapabilities: {} });
  out({ kind: "initialized", response: init });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    const c = JSON.parse(line);
    if (c.op === "request") {
      cx.request(c.method, c.params).then(
        (result) => out({ kind: "response", tag: c.tag, result }),
        (e) => out({ kind: "error", tag: c.tag, error: errorOf(e) }),
      );
    } else if (c.op === "notify") {
      await cx.notify(c.method, c.params);
    } else if (c.op === "answers") {
      answers.push(...c.list);
    } else if (c.op === "close") {
      break;
    }
  }
  agent.stdin.end();
  await new Promise(() => {}); // until the agent exits (its exit handler ends this process)
}

await app.connectWith(stream, drive).catch(() => {});
