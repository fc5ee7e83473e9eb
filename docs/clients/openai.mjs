import OpenAI from "openai";

const client = new OpenAI({ baseURL: "http://127.0.0.1:8080/v1", apiKey: "unused" });
const model = "qwen3-embedding-0.6b";

const docs = [
  "The capital of China is Beijing.",
  "Gravity is a force that attracts two bodies towards each other.",
];
// Documents are embedded as they are; a query gets the instruction (input_type).
const d = await client.embeddings.create({ model, input: docs });
const q = await client.embeddings.create({
  model,
  input: "What is the capital of China?",
  input_type: "query",
});

// The vectors are L2-normalised: the dot product is the cosine similarity.
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
for (const [i, doc] of docs.entries()) {
  console.log(dot(q.data[0].embedding, d.data[i].embedding).toFixed(4), doc);
}
