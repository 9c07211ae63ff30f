// A client in another language (JavaScript on Node.js 18+, with nothing but fetch): declare a
// queue, publish with Idempotency-Keys retrying through 429s, receive, ack and nack, then redrive
// a dead letter as an operator. Prints a JSON summary for the Python test to check.
//
//   node tests/clients/flow.mjs URL ADMIN_KEY PUBLISH_KEY CONSUME_KEY

const [base, adminKey, publishKey, consumeKey] = process.argv.slice(2);
const queue = "js-orders";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function call(method, path, key, body, headers = {}) {
  const response = await fetch(base + path, {
    method,
    headers: {
      Authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null };
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

// Publish once per key, retrying 429 (after Retry-After) and 409 (in flight) with the same key.
async function publish(payload, idempotencyKey, stats) {
  for (let attempt = 0; attempt < 20; attempt++) {
    const r = await call("POST", "/v1/queue/publish", publishKey, { queue, payload }, {
      "Idempotency-Key": idempotencyKey,
    });
    if (r.status === 201 || r.status === 200) return r;
    if (r.status === 429) {
      stats.rateLimited++;
      const wait = Number(r.headers.get("retry-after") ?? "1");
      await sleep(wait * 1000);
      continue;
    }
    if (r.status === 409) {
      await sleep(100 * 2 ** attempt);
      continue;
    }
    throw new Error(`publish ${idempotencyKey}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  throw new Error(`publish ${idempotencyKey}: gave up`);
}

const stats = { rateLimited: 0, published: [], replayed: false, acked: [], nacked: [], redriven: [] };

// 1. The operator declares the queue.
const declared = await call("PUT", `/v1/queues/${queue}`, adminKey, { max_attempts: 3 });
check(declared.status === 201 || declared.status === 200, `declare: ${declared.status}`);

// 2. Publish five orders; the key's rate limit answers some with 429.
const actions = { "order-1": "ack", "order-2": "ack", "order-3": "retry", "order-4": "dead", "order-5": "ack" };
for (const [key, action] of Object.entries(actions)) {
  const r = await publish({ order: key, action }, key, stats);
  check(r.status === 201, `publish ${key}: expected 201, got ${r.status}`);
  stats.published.push(r.body.message_id);
}
// A retry of a publish that succeeded is a replay: same message id, nothing new.
const replay = await publish({ order: "order-1", action: "ack" }, "order-1", stats);
check(replay.status === 200 && replay.headers.get("idempotent-replayed") === "true", "replay");
check(replay.body.message_id === stats.published[0], "replay message id");
stats.replayed = true;
const reused = await call("POST", "/v1/queue/publish", publishKey, { queue, payload: { other: 1 } }, {
  "Idempotency-Key": "order-1",
});
check(reused.status === 422 || reused.status === 429, `reused key: ${reused.status}`);

// 3. Consume: ack, nack with a retry, nack permanent.
let done = 0;
const deadline = Date.now() + 30000;
while (done < 5 && Date.now() < deadline) {
  const r = await call("POST", "/v1/queue/receive", consumeKey, {
    queue, max_messages: 10, wait_seconds: 2, consumer: "node",
  });
  check(r.status === 200, `receive: ${r.status}`);
  for (const m of r.body.messages) {
    if (m.payload.action === "dead") {
      const n = await call("POST", "/v1/queue/nack", consumeKey, { receipt: m.receipt, error: "no such customer", permanent: true });
      check(n.status === 200 && n.body.state === "dead", `nack permanent: ${JSON.stringify(n.body)}`);
      stats.nacked.push(m.key);
      done++;
    } else if (m.payload.action === "retry" && m.attempt === 1) {
      const n = await call("POST", "/v1/queue/nack", consumeKey, { receipt: m.receipt, error: "busy", retry_after_seconds: 0 });
      check(n.status === 200 && n.body.state === "pending", `nack retry: ${JSON.stringify(n.body)}`);
      stats.nacked.push(m.key);
    } else {
      const a = await call("POST", "/v1/queue/ack", consumeKey, { receipt: m.receipt });
      check(a.status === 200, `ack: ${a.status}`);
      // The same receipt again is stale: 409, and nothing changes.
      const again = await call("POST", "/v1/queue/ack", consumeKey, { receipt: m.receipt });
      check(again.status === 409, `second ack: ${again.status}`);
      stats.acked.push(m.key);
      done++;
    }
  }
}
check(done === 5, `consumed ${done} of 5`);

// 4. The operator finds the dead letter and redrives it; the consumer acks it this time.
const dead = await call("GET", `/v1/queues/${queue}/messages?state=dead`, adminKey);
check(dead.status === 200 && dead.body.messages.length === 1, "one dead letter");
const redrive = await call("POST", `/v1/queues/${queue}/redrive`, adminKey, {
  reason: "customer created", actor: "node-operator",
});
check(redrive.status === 200 && redrive.body.message_ids.length === 1, `redrive: ${JSON.stringify(redrive.body)}`);
stats.redriven = redrive.body.message_ids;
const again = await call("POST", "/v1/queue/receive", consumeKey, { queue, wait_seconds: 5 });
check(again.body.messages.length === 1 && again.body.messages[0].attempt === 2, "redriven delivery");
const ack = await call("POST", "/v1/queue/ack", consumeKey, { receipt: again.body.messages[0].receipt });
check(ack.status === 200, "ack redriven");

console.log(JSON.stringify(stats));
