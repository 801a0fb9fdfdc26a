// The OpenAI Node SDK against the gateway: a chat completion given whole, then streamed, then a
// completion. Prints one JSON object of what the SDK returned, for the Python test to check.
//
//   node chat.mjs <base URL ending in /v1> <model> <max_tokens>

import OpenAI from "openai";

const [baseURL, model, maxTokensArg] = process.argv.slice(2);
const maxTokens = Number(maxTokensArg);
const client = new OpenAI({ baseURL, apiKey: "none", maxRetries: 0, timeout: 120_000 });
const messages = [{ role: "user", content: "Tell me about shards." }];
const common = { model, max_tokens: maxTokens, temperature: 0, ignore_eos: true };

const whole = await client.chat.completions.create({ ...common, messages });

const stream = await client.chat.completions.create({
  ...common,
  messages,
  stream: true,
  stream_options: { include_usage: true },
});
let chunks = 0;
let content = "";
let finishReason = null;
let usage = null;
const roles = [];
for await (const chunk of stream) {
  chunks += 1;
  if (chunk.usage) usage = chunk.usage;
  for (const choice of chunk.choices) {
    if (choice.delta.role) roles.push(choice.delta.role);
    if (choice.delta.content) content += choice.delta.content;
    if (choice.finish_reason) finishReason = choice.finish_reason;
  }
}

// The same stream through the SDK's helper, which assembles the final completion itself.
const runner = client.chat.completions.stream({ ...common, messages });
const final = await runner.finalChatCompletion();

const completion = await client.completions.create({ ...common, prompt: "Shards are" });

console.log(
  JSON.stringify({
    whole: {
      id: whole.id,
      object: whole.object,
      content: whole.choices[0].message.content,
      finish_reason: whole.choices[0].finish_reason,
      usage: whole.usage,
    },
    streamed: { chunks, roles, content, finish_reason: finishReason, usage },
    helper: {
      content: final.choices[0].message.content,
      finish_reason: final.choices[0].finish_reason,
    },
    completion: {
      object: completion.object,
      text: completion.choices[0].text,
      finish_reason: completion.choices[0].finish_reason,
      usage: completion.usage,
    },
  }),
);
