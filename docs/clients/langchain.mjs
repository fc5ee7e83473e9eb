import { OpenAIEmbeddings } from "@langchain/openai";

const configuration = { baseURL: "http://127.0.0.1:8080/v1" };
// LangChain has no input_type: the ":query" model suffix makes embedQuery a query.
const documents = new OpenAIEmbeddings({ model: "qwen3-embedding-0.6b", apiKey: "unused", configuration });
const queries = new OpenAIEmbeddings({ model: "qwen3-embedding-0.6b:query", apiKey: "unused", configuration });

const docs = [
  "The capital of China is Beijing.",
  "Gravity is a force that attracts two bodies towards each other.",
];
const d = await documents.embedDocuments(docs);
const q = await queries.embedQuery("What is the capital of China?");

const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
for (const [i, doc] of docs.entries()) {
  console.log(dot(q, d[i]).toFixed(4), doc);
}
