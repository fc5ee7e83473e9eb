// Command goclient is the go-openai snippet of docs/clients.md: it ranks two documents
// for a query against an embed-stack server on the default address. Its test runs it
// against a real server; the page shows this file as it is.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	openai "github.com/sashabaranov/go-openai"
)

func main() {
	if err := rank(context.Background(), "http://127.0.0.1:8080/v1", os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func rank(ctx context.Context, baseURL string, w io.Writer) error {
	cfg := openai.DefaultConfig("unused")
	cfg.BaseURL = baseURL
	client := openai.NewClientWithConfig(cfg)
	const model = "qwen3-embedding-0.6b"

	docs := []string{
		"The capital of China is Beijing.",
		"Gravity is a force that attracts two bodies towards each other.",
	}
	// Documents are embedded as they are; a query gets the instruction (input_type).
	d, err := client.CreateEmbeddings(ctx, openai.EmbeddingRequestStrings{Model: model, Input: docs})
	if err != nil {
		return err
	}
	q, err := client.CreateEmbeddings(ctx, openai.EmbeddingRequestStrings{
		Model:     model,
		Input:     []string{"What is the capital of China?"},
		ExtraBody: map[string]any{"input_type": "query"},
	})
	if err != nil {
		return err
	}

	// The vectors are L2-normalised: the dot product is the cosine similarity.
	for i, doc := range docs {
		var dot float32
		for j, x := range q.Data[0].Embedding {
			dot += x * d.Data[i].Embedding[j]
		}
		fmt.Fprintf(w, "%.4f %s\n", dot, doc)
	}
	return nil
}
