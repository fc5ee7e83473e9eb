from langchain_openai import OpenAIEmbeddings

base_url = "http://127.0.0.1:8080/v1"
# LangChain has no input_type: the ":query" model suffix makes embed_query a query.
# It sends tiktoken token ids by default; the server decodes them (--token-ids=cl100k).
documents = OpenAIEmbeddings(model="qwen3-embedding-0.6b", base_url=base_url, api_key="unused")
queries = OpenAIEmbeddings(model="qwen3-embedding-0.6b:query", base_url=base_url, api_key="unused")

docs = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
]
d = documents.embed_documents(docs)
q = queries.embed_query("What is the capital of China?")

dot = lambda a, b: sum(x * y for x, y in zip(a, b))
for i, doc in enumerate(docs):
    print(f"{dot(q, d[i]):.4f}", doc)
