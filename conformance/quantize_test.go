package conformance

import (
	"encoding/base64"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The quantized outputs' reference, written out independently of package quantize
// from docs/quantization.md: int8 = clamp(round(x * 32 * sqrt(d)), -127, 127),
// uint8 = int8 + 128, ubinary = sign bits (x > 0) with dimension 0 in the most
// significant bit of byte 0, binary = ubinary - 128.
const quantGain = 32

func refInt8(v []float64) []int {
	out := make([]int, len(v))
	s := quantGain * math.Sqrt(float64(len(v)))
	for i, x := range v {
		// The server quantizes the float32 the float response prints.
		out[i] = int(max(-127, min(127, math.Round(float64(float32(x))*s))))
	}
	return out
}

func refUbinary(v []float64) []int {
	out := make([]int, (len(v)+7)/8)
	for i, x := range v {
		if x > 0 {
			out[i/8] |= 1 << (7 - i%8)
		}
	}
	return out
}

// quantResponse is /v1/embeddings with integer (or base64) embeddings.
type quantResponse struct {
	Object string `json:"object"`
	Data   []struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	} `json:"data"`
	Model string `json:"model"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
		TotalTokens  int `json:"total_tokens"`
	} `json:"usage"`
}

func (s *server) quantEmbed(t *testing.T, body map[string]any) [][]int {
	t.Helper()
	r := s.do(t, http.MethodPost, "/v1/embeddings", body, nil)
	if r.status != http.StatusOK {
		t.Fatalf("POST /v1/embeddings %v: %d %s", body["encoding_format"], r.status, truncate(r.body))
	}
	var out quantResponse
	r.decode(t, &out)
	vecs := make([][]int, len(out.Data))
	for i, d := range out.Data {
		if d.Index != i {
			t.Fatalf("index %d at %d", d.Index, i)
		}
		arr, ok := d.Embedding.([]any)
		if !ok {
			t.Fatalf("embedding %d is %T, want an array of integers", i, d.Embedding)
		}
		for _, x := range arr {
			f := x.(float64)
			if f != math.Trunc(f) {
				t.Fatalf("embedding %d holds %v, not an integer", i, f)
			}
			vecs[i] = append(vecs[i], int(f))
		}
	}
	return vecs
}

// opticksPassages returns n paragraphs of testdata/corpus/opticks.txt of 100 to 800
// bytes, whitespace collapsed, from the start of the book.
func opticksPassages(t *testing.T, n int) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "testdata", "corpus", "opticks.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range strings.Split(string(raw), "\n\n") {
		p = strings.Join(strings.Fields(p), " ")
		if len(p) >= 100 && len(p) <= 800 {
			out = append(out, p)
		}
		if len(out) == n {
			return out
		}
	}
	t.Fatalf("only %d passages", len(out))
	return nil
}

// topK returns the indices of the k largest scores (ties by index).
func topK(scores []float64, k int) []int {
	idx := make([]int, len(scores))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return scores[idx[a]] > scores[idx[b]] })
	return idx[:k]
}

func overlap(a, b []int) int {
	n := 0
	for _, x := range a {
		if slices.Contains(b, x) {
			n++
		}
	}
	return n
}

// Quantized vectors from the real binary and the tiny model: exactly the documented
// function of the float vectors, and ranking a corpus as the floats do. Corpus: the
// first 160 paragraphs of Opticks of 100 to 800 bytes as documents, the first 150
// bytes (to a word boundary) of every 4th as queries (40);
// recall@10 is the share of the float top 10 that the quantized top 10 holds,
// averaged over the queries.
func TestQuantizedRetrieval(t *testing.T) {
	// One llama.cpp thread: on a loaded machine two threads meeting at barriers made
	// the tiny model twenty times slower (internal/e2e.Serve says more).
	s := serverWith(t, "--threads", "1")
	docs := opticksPassages(t, 160)
	var queries []string
	for i := 0; i < len(docs); i += 4 {
		q := docs[i][:min(150, len(docs[i]))]
		queries = append(queries, q[:strings.LastIndexByte(q, ' ')])
	}
	for _, dims := range []int{0, 32} {
		body := func(input []string, typ, format string) map[string]any {
			b := map[string]any{"input": input, "encoding_format": format}
			if typ == "query" {
				b["input_type"] = "query"
			}
			if dims > 0 {
				b["dimensions"] = dims
			}
			return b
		}
		floats := func(input []string, typ string) [][]float64 {
			out := s.rawEmbed(t, body(input, typ, "float"), nil)
			v := make([][]float64, len(out.Data))
			for i, d := range out.Data {
				v[i] = d.Embedding
			}
			return v
		}
		fd, fq := floats(docs, "document"), floats(queries, "query")
		d := len(fd[0])

		// Exactness: each type is the documented function of the float vector.
		// int8 and ubinary for the whole corpus (they are ranked below), the other
		// two for its first 20 documents.
		quant := map[string][][]int{}
		for _, typ := range []string{"int8", "ubinary"} {
			quant[typ] = s.quantEmbed(t, body(docs, "document", typ))
			quant[typ+"/q"] = s.quantEmbed(t, body(queries, "query", typ))
		}
		for _, typ := range []string{"uint8", "binary"} {
			quant[typ] = s.quantEmbed(t, body(docs[:20], "document", typ))
		}
		for i, v := range fd {
			i8, ub := refInt8(v), refUbinary(v)
			u8, b := make([]int, d), make([]int, len(ub))
			for j := range i8 {
				u8[j] = i8[j] + 128
			}
			for j := range ub {
				b[j] = ub[j] - 128
			}
			for typ, want := range map[string][]int{"int8": i8, "uint8": u8, "ubinary": ub, "binary": b} {
				if i >= len(quant[typ]) {
					continue
				}
				if !slices.Equal(quant[typ][i], want) {
					t.Fatalf("dims %d doc %d %s:\n got %v\nwant %v", d, i, typ, quant[typ][i], want)
				}
			}
		}
		// base64 carries the same integers as bytes.
		r := s.do(t, http.MethodPost, "/v1/embeddings", map[string]any{"input": docs[:2], "output_dtype": "int8", "encoding_format": "base64", "dimensions": d}, nil)
		var b64 quantResponse
		r.decode(t, &b64)
		for i, e := range b64.Data {
			raw, err := base64.StdEncoding.DecodeString(e.Embedding.(string))
			if err != nil || len(raw) != d {
				t.Fatalf("base64 int8 %d: %d bytes, %v", i, len(raw), err)
			}
			for j, x := range raw {
				if int(int8(x)) != quant["int8"][i][j] {
					t.Fatalf("base64 int8 %d[%d] = %d, the integer array has %d", i, j, int8(x), quant["int8"][i][j])
				}
			}
		}

		// Calibration figures: how far components reach in root-mean-squares.
		var maxSigma float64
		clipped, total := 0, 0
		for _, v := range append(slices.Clone(fd), fq...) {
			for _, x := range v {
				sigma := math.Abs(x) * math.Sqrt(float64(d))
				maxSigma = max(maxSigma, sigma)
				if sigma > 127.0/quantGain {
					clipped++
				}
				total++
			}
		}

		// Ranking: float dot products vs int8 dot products and binary Hamming
		// distances.
		var recallInt8, recallBin, rho float64
		top1 := 0
		for qi, q := range fq {
			fs, is, bs := make([]float64, len(fd)), make([]float64, len(fd)), make([]float64, len(fd))
			for di := range fd {
				for j := range q {
					fs[di] += q[j] * fd[di][j]
					is[di] += float64(quant["int8/q"][qi][j] * quant["int8"][di][j])
				}
				ham := 0
				for j, x := range quant["ubinary/q"][qi] {
					ham += popcount(x ^ quant["ubinary"][di][j])
				}
				bs[di] = -float64(ham)
			}
			rho += spearman(fs, is)
			ft := topK(fs, 10)
			recallInt8 += float64(overlap(ft, topK(is, 10))) / 10
			recallBin += float64(overlap(ft, topK(bs, 10))) / 10
			if topK(is, 1)[0] == ft[0] {
				top1++
			}
		}
		recallInt8 /= float64(len(fq))
		recallBin /= float64(len(fq))
		rho /= float64(len(fq))
		t.Logf("dims %d: %d docs, %d queries; max |x|*sqrt(d) %.2f, clipped %d of %d components; int8: recall@10 %.3f, Spearman rho of all %d scores %.4f, top-1 kept for %d of %d; binary (Hamming): recall@10 %.3f",
			d, len(fd), len(fq), maxSigma, clipped, total, recallInt8, len(fd), rho, top1, len(fq), recallBin)
		// Thresholds: the values measured on this corpus (docs/quantization.md) less a
		// margin. Random ranking would give recall@10 = 10/160 = 0.06.
		if clipped > 0 {
			t.Errorf("dims %d: %d components clipped; the calibration measured none on this corpus", d, clipped)
		}
		if recallInt8 < 0.93 || rho < 0.99 {
			t.Errorf("dims %d: int8 recall@10 %.3f (want >= 0.93), rho %.4f (want >= 0.99)", d, recallInt8, rho)
		}
		if recallBin < 0.15 {
			t.Errorf("dims %d: binary recall@10 %.3f, want >= 0.15", d, recallBin)
		}
	}
}

func popcount(x int) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// spearman is the rank correlation of two score lists (no ties expected in a).
func spearman(a, b []float64) float64 {
	ranks := func(x []float64) []float64 {
		idx := make([]int, len(x))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(i, j int) bool { return x[idx[i]] < x[idx[j]] })
		r := make([]float64, len(x))
		for i := 0; i < len(idx); {
			j := i
			for j+1 < len(idx) && x[idx[j+1]] == x[idx[i]] {
				j++
			}
			for k := i; k <= j; k++ { // ties share their mean rank
				r[idx[k]] = float64(i+j) / 2
			}
			i = j + 1
		}
		return r
	}
	ra, rb := ranks(a), ranks(b)
	var ma, mb float64
	for i := range ra {
		ma += ra[i]
		mb += rb[i]
	}
	ma /= float64(len(ra))
	mb /= float64(len(rb))
	var num, da, db float64
	for i := range ra {
		num += (ra[i] - ma) * (rb[i] - mb)
		da += (ra[i] - ma) * (ra[i] - ma)
		db += (rb[i] - mb) * (rb[i] - mb)
	}
	return num / math.Sqrt(da*db)
}
