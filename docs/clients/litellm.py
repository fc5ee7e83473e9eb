import litellm

api_base = "http://127.0.0.1:8080/v1"
# "openai/" routes to an OpenAI-compatible server and is stripped from the model name
# sent, so the ":query" suffix makes a query.
docs = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
]
d = litellm.embedding(model="openai/qwen3-embedding-0.6b", input=docs, api_base=api_base, api_key="unused")
q = litellm.embedding(model="openai/qwen3-embedding-0.6b:query", input=["What is the capital of China?"],
                      api_base=api_base, api_key="unused")

dot = lambda a, b: sum(x * y for x, y in zip(a, b))
for i, doc in enumerate(docs):
    print(f"{dot(q.data[0]['embedding'], d.data[i]['embedding']):.4f}", doc)
