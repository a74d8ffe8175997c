// OpenAI's Node client against a snapbuild server: `node clients.mjs BASE_URL MODEL`.
// Prints one JSON object of what each call gave back; tests/test_clients_node.py asserts on it.
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
const out = {};

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    },
  },
};
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

const chat = await client.chat.completions.create({
  model, messages: [{ role: "user", content: "Hi" }], max_tokens: 8, temperature: 0,
});
out.chat = chat.choices[0].message.content;

const called = await client.chat.completions.create({
  model, messages: ask, tools: [weather], tool_choice: "required", parallel_tool_calls: false,
  max_tokens: 60, temperature: 0,
});
out.tool_calls = called.choices[0].message.tool_calls;
out.tool_content = called.choices[0].message.content;

const pieces = [];
const stream = await client.chat.completions.create({
  model, messages: ask, tools: [weather], tool_choice: "required", parallel_tool_calls: false,
  max_tokens: 60, temperature: 0,
  stream: true, stream_options: { include_usage: true },
});
for await (const chunk of stream) {
  for (const choice of chunk.choices) pieces.push(...(choice.delta.tool_calls ?? []));
  if (chunk.usage) out.streamed_usage = chunk.usage;
}
out.streamed_calls = pieces;

const legacy = await client.completions.create({
  model, prompt: ["The cat sat", "Hello"], n: 2, max_tokens: 3, temperature: 0,
});
out.legacy = legacy;

const response = await client.responses.create({
  model, input: "Say hello", max_output_tokens: 200, temperature: 0,
});
out.response_text = response.output_text;
out.response_status = response.status;

const events = [];
const streamed = await client.responses.create({
  model, input: "Say hello", max_output_tokens: 200, temperature: 0, stream: true,
});
for await (const event of streamed) events.push(event.type);
out.response_events = events;

try {
  await client.chat.completions.create({
    model, messages: [{ role: "user", content: "Hi" }], temperature: 7,
  });
} catch (error) {
  out.error = { name: error.constructor.name, status: error.status, param: error.param };
}

console.log(JSON.stringify(out));
