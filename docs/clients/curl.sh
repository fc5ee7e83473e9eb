curl -s http://127.0.0.1:8080/v1/embeddings \
  -H 'Content-Type: application/json' \
  -d '{
    "model": "qwen3-embedding-0.6b",
    "input": ["What is the capital of China?"],
    "input_type": "query",
    "dimensions": 64
  }'
