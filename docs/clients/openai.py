from openai import OpenAI

client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused")
model = "qwen3-embedding-0.6b"

docs = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
]
# Documents are embedded as they are; a query gets the instruction (input_type).
d = client.embeddings.create(model=model, input=docs)
q = client.embeddings.create(
    model=model,
    input="What is the capital of China?",
    extra_body={"input_type": "query"},
)

# The vectors are L2-normalised: the dot product is the cosine similarity.
dot = lambda a, b: sum(x * y for x, y in zip(a, b))
for i, doc in enumerate(docs):
    print(f"{dot(q.data[0].embedding, d.data[i].embedding):.4f}", doc)
