// Node's official `openai` package against the online lane: each case's outcome as one JSON
// object on stdout, for tests/e2e/test_real_clients.py to check. Usage:
//   node openai_client.mjs <base_url> <caller key>
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30_000 });
const results = {};

async function attempt(name, work) {
  try {
    results[name] = { ok: true, ...(await work()) };
  } catch (error) {
    results[name] = {
      ok: false,
      status: error.status ?? null,
      param: error.param ?? null,
      code: error.code ?? null,
      message: error.message,
    };
  }
}

const vectors = (answer) => answer.data.map((d) => Array.from(d.embedding));

await attempt("string_float", async () => {
  const answer = await client.embeddings.create({ model: "m", input: "hello node", encoding_format: "float" });
  return { vectors: vectors(answer), usage: answer.usage };
});
await attempt("string_base64_default", async () => {
  // The SDK asks for base64 unless told otherwise, and decodes it.
  const answer = await client.embeddings.create({ model: "m", input: "hello node" });
  return { vectors: vectors(answer) };
});
await attempt("list_600", async () => {
  const input = Array.from({ length: 600 }, (_, i) => `node text ${i}`);
  const answer = await client.embeddings.create({ model: "m", input, encoding_format: "float" });
  return {
    count: answer.data.length,
    indices_in_order: answer.data.every((d, i) => d.index === i),
    first: Array.from(answer.data[0].embedding),
    last: Array.from(answer.data[599].embedding),
  };
});
await attempt("token_ids", async () => {
  const answer = await client.embeddings.create({ model: "m", input: [[10, 20, 30], [40]], encoding_format: "float" });
  return { vectors: vectors(answer) };
});
await attempt("dimensions", async () => {
  const answer = await client.embeddings.create({ model: "m", input: "short", dimensions: 64, encoding_format: "float" });
  return { vectors: vectors(answer) };
});
await attempt("empty_string", async () => client.embeddings.create({ model: "m", input: ["ok", ""] }));
await attempt("dimensions_refused", async () =>
  client.embeddings.create({ model: "m", input: ["a", "b", "c"], dimensions: 5000 }));
await attempt("bad_key", async () => {
  const other = new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0 });
  return other.embeddings.create({ model: "m", input: "x" });
});

process.stdout.write(JSON.stringify(results));
