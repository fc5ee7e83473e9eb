package server

import (
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/quantize"
	"github.com/embed-stack/embed-stack/routing"
)

// quantizeResponse turns resp's unit vectors into the quantized type the request
// named (package quantize owns the scaling and bit order); "float" leaves them.
func quantizeResponse(resp *openai.EmbeddingResponse, outputType string) {
	t, ok := quantize.Parse(outputType)
	if !ok || t == quantize.Float {
		return
	}
	resp.Quantized = make([][]byte, len(resp.Vectors))
	for i, v := range resp.Vectors {
		resp.Quantized[i] = quantize.Quantize(t, v)
	}
	resp.Signed = t.Signed()
}

// truncation maps the decoded `truncate` field (openai.DecodeTruncate's values) to
// routing's.
func truncation(s string) routing.Truncation {
	switch s {
	case openai.TruncateEnd:
		return routing.TruncateEnd
	case openai.TruncateStart:
		return routing.TruncateStart
	}
	return routing.NoTruncation
}
