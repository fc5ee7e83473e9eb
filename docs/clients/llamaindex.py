# pip install llama-index-embeddings-openai-like
from llama_index.embeddings.openai_like import OpenAILikeEmbedding

api_base = "http://127.0.0.1:8080/v1"
# LlamaIndex has no input_type either: one model for documents, one (":query") for
# queries, e.g. Settings.embed_model = documents and
# index.as_retriever(embed_model=queries).
documents = OpenAILikeEmbedding(model_name="qwen3-embedding-0.6b", api_base=api_base, api_key="unused")
queries = OpenAILikeEmbedding(model_name="qwen3-embedding-0.6b:query", api_base=api_base, api_key="unused")

docs = [
    "The capital of China is Beijing.",
    "Gravity is a force that attracts two bodies towards each other.",
]
d = documents.get_text_embedding_batch(docs)
q = queries.get_query_embedding("What is the capital of China?")

dot = lambda a, b: sum(x * y for x, y in zip(a, b))
for i, doc in enumerate(docs):
    print(f"{dot(q, d[i]):.4f}", doc)
