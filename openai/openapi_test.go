package openai

import (
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/internal/schemacheck"
)

// The fields the decoder reads are exactly the properties server/openapi.json
// documents for the embeddings request (server's tests check the routes and the
// answers).
func TestOpenAPIEmbeddingRequestFields(t *testing.T) {
	raw, err := os.ReadFile("../server/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := schemacheck.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	typ := reflect.TypeOf(wireRequest{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		fields = append(fields, name)
	}
	slices.Sort(fields)
	if got := doc.Properties("EmbeddingRequest"); !slices.Equal(got, fields) {
		t.Errorf("openapi.json EmbeddingRequest properties %v, decoder fields %v", got, fields)
	}
}
