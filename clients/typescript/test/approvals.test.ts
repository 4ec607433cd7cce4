// Approvals that wait (docs/http.md) against a real spine serve that asks
// for them: --ask 'prices.*' (the demo tool prices.list) and --ask
// '*.delete' (a client tool files.delete). Every run here ends, decided.

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { ApprovalRequired, Client, SpineError, type Approval, type Tools } from "../src/index.js";
import { runIdPattern, startSpine, type Spine } from "./server.js";

let spine: Spine;
let client: Client;

before(async () => {
  spine = await startSpine("--ask", "prices.*", "--ask", "*.delete", "--replica", "ask");
  client = new Client({ baseUrl: spine.url });
});

after(async () => {
  await spine?.stop();
});

const refused = "try:\n    prices.list()\nexcept PermissionError as e:\n    r = str(e)\nr";

test("approve allows a call", async () => {
  const seen: Approval[] = [];
  const r = await client.run('print("asking")\nlen(prices.list(limit=2))', {
    approve: (a) => {
      seen.push(a);
      return true;
    },
  });
  assert.equal(r.value, 2);
  assert.equal(r.stdout, "asking\n");
  assert.equal(r.rounds, 1);
  assert.match(r.runId!, runIdPattern);
  assert.equal(seen.length, 1);
  const [a] = seen;
  assert.deepEqual([a.id, a.tool, a.arguments, a.runId], ["approval_1", "prices.list", { limit: 2 }, r.runId]);
  assert.ok(a.reason.includes("--ask prices.*"), a.reason);
});

test("approve refuses a call: PermissionError in the program, with the reason", async () => {
  assert.equal((await client.run(refused, { approve: () => ({ allow: false, reason: "not on a Friday" }) })).value, "not on a Friday");
  assert.equal((await client.run(refused, { approve: async () => false })).value, "the caller refused the call");
  const r = await client.run("prices.list()\nlen(prices.list(limit=1))", { approve: () => ({ allow: true }) });
  assert.equal(r.value, 1);
  assert.equal(r.rounds, 2); // one approval a call
});

test("without approve an ApprovalRequired carries the run, and decide answers it", async () => {
  const deleted: unknown[] = [];
  const tools: Tools = {
    "files.delete": {
      inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
      handler: ({ path }) => {
        deleted.push(path);
        return `deleted ${String(path)}`;
      },
    },
  };
  const e = await client.run('print("before")\nfiles.delete("/tmp/x")', { tools }).catch((err: unknown) => err);
  assert.ok(e instanceof ApprovalRequired, String(e));
  assert.ok(e instanceof SpineError);
  assert.deepEqual([e.status, e.kind], [200, "approval_required"]);
  assert.match(e.runId, runIdPattern);
  assert.ok(e.message.includes(e.runId) && e.message.includes("files.delete (approval_1)"), e.message);
  assert.deepEqual(e.approvals.map((a) => [a.tool, a.arguments, a.runId]), [["files.delete", { path: "/tmp/x" }, e.runId]]);
  assert.equal(e.result?.stdout, "before\n");
  assert.deepEqual(deleted, []);
  const r = await client.decide(e.runId, e.approvals.map((a) => ({ id: a.id, allow: true })), { tools });
  assert.equal(r.value, "deleted /tmp/x");
  assert.deepEqual(deleted, ["/tmp/x"]);
  assert.equal(r.rounds, 2); // the approval, then files.delete's own pause
  assert.equal(r.runId, e.runId);
});

test("an approve that returns no decision throws; its run still waits", async () => {
  const seen: Approval[] = [];
  const e = await client
    .run("prices.list()", { approve: (a) => (seen.push(a), "yes" as unknown as boolean) })
    .catch((err: unknown) => err);
  assert.ok(e instanceof TypeError, String(e));
  assert.ok(e.message.includes(`prices.list's call approval_1 of run ${seen[0].runId}`), e.message);
  const refusal = await client.decide(seen[0].runId, [{ id: "approval_1", allow: false }]).catch((err: unknown) => err);
  assert.ok(refusal instanceof SpineError, String(refusal));
  assert.deepEqual([refusal.kind, refusal.error.type, refusal.runId], ["python", "PermissionError", seen[0].runId]);
});

test("a session's run asks too", async () => {
  const s = await client.createSession();
  try {
    assert.equal((await s.run("p = prices.list(limit=1)", { approve: () => true })).rounds, 1);
    assert.equal((await s.run("len(p)")).value, 1);
  } finally {
    await s.delete();
  }
});
