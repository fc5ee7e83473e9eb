package llama

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/embed-stack/embed-stack/backends"
	"github.com/embed-stack/embed-stack/gguf"
)

// shape06B is Qwen3-Embedding-0.6B's header, as far as resolve reads it.
var shape06B = gguf.Shape{Architecture: "qwen3", ContextLength: 32768, EmbeddingLength: 1024, Layers: 28,
	Heads: 16, KVHeads: 8, KeyLength: 128, ValueLength: 128, Pooling: gguf.PoolingLast, VocabSize: 151669}

// shapeMiniLM is all-MiniLM-L6-v2's header, as far as resolve reads it.
var shapeMiniLM = gguf.Shape{Architecture: "bert", ContextLength: 512, EmbeddingLength: 384, Layers: 6,
	Heads: 12, KVHeads: 12, KeyLength: 32, ValueLength: 32, Pooling: gguf.PoolingMean, VocabSize: 30522}

// TestResolve pins the sizing of the contexts, which decides which kernel embeds a
// sequence (and so its vector, bit for bit): every default, and each limit that
// cuts a default down.
func TestResolve(t *testing.T) {
	cpus := runtime.NumCPU()
	gpuThreads := min(4, cpus)
	tests := []struct {
		name  string
		cfg   Config
		shape gguf.Shape
		sched schedule
		want  sizes
	}{
		{"CPU defaults: 8192 tokens, packed short rounds, 256-token long calls", Config{}, shape06B, cpuSchedule, sizes{
			ctxTokens: 8192, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 8192, batchTokens: 256, maxSeqs: 1},
			shortMax: 128, shortJobs: &backends.ShortJobs{MaxTokens: 128, BatchTokens: 512, MaxSeqs: 64},
		}},
		// 512 MiB of scores over 32768 cells and 16 heads holds 256 tokens a call;
		// 64 MiB holds 32.
		{"32768-token context", Config{ContextTokens: 32768, Threads: 2, MaxSeqs: 8}, shape06B, cpuSchedule, sizes{
			ctxTokens: 32768, batchTokens: 512, maxSeqs: 8, threads: 2, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 512, batchTokens: 512, maxSeqs: 8},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 32768, batchTokens: 256, maxSeqs: 1},
			shortMax: 128, shortJobs: &backends.ShortJobs{MaxTokens: 128, BatchTokens: 512, MaxSeqs: 8},
		}},
		{"attention bytes cut the long calls", Config{ContextTokens: 32768, AttentionBytes: 64 << 20}, shape06B, cpuSchedule, sizes{
			ctxTokens: 32768, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 32768, batchTokens: 32, maxSeqs: 1},
			shortMax: 128, shortJobs: &backends.ShortJobs{MaxTokens: 128, BatchTokens: 512, MaxSeqs: 64},
		}},
		{"small batch: the short rounds hold one 128-token sequence over two calls", Config{ContextTokens: 1024, BatchTokens: 64}, shape06B, cpuSchedule, sizes{
			ctxTokens: 1024, batchTokens: 64, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 128, batchTokens: 64, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 1024, batchTokens: 64, maxSeqs: 1},
			shortMax: 128, shortJobs: &backends.ShortJobs{MaxTokens: 128, BatchTokens: 64, MaxSeqs: 64},
		}},
		{"a context no longer than FlashMaxTokens has no long context", Config{ContextTokens: 128}, shape06B, cpuSchedule, sizes{
			ctxTokens: 128, batchTokens: 128, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 128, batchTokens: 128, maxSeqs: 64},
			shortMax: 128,
		}},
		{"training context below the default", Config{}, gguf.Shape{ContextLength: 100, Heads: 4}, cpuSchedule, sizes{
			ctxTokens: 100, batchTokens: 100, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 100, batchTokens: 100, maxSeqs: 64},
			shortMax: 100,
		}},
		{"no training context: the default", Config{}, gguf.Shape{Heads: 4}, cpuSchedule, sizes{
			ctxTokens: 8192, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlashBF16V, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 8192, batchTokens: 256, maxSeqs: 1},
			shortMax: 128, shortJobs: &backends.ShortJobs{MaxTokens: 128, BatchTokens: 512, MaxSeqs: 64},
		}},
		{"GPU defaults: flash attention throughout, 2048-token calls", Config{GPULayers: 10}, shape06B, gpuSchedule, sizes{
			ctxTokens: 8192, batchTokens: 2048, maxSeqs: 128, threads: gpuThreads, gpuLayers: 10, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlash, ctxTokens: 2048, batchTokens: 2048, maxSeqs: 128},
			long:     &contextSize{kernel: attnFlash, ctxTokens: 8192, batchTokens: 2048, maxSeqs: 1},
			shortMax: 512, shortJobs: &backends.ShortJobs{MaxTokens: 512, BatchTokens: 2048, MaxSeqs: 128},
		}},
		{"measurement: plain attention alone", Config{ContextTokens: 4096, attention: attnPlain}, shape06B, cpuSchedule, sizes{
			ctxTokens: 4096, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnPlain, ctxTokens: 4096, batchTokens: 256, maxSeqs: 64},
			shortMax: 4096,
		}},
		{"measurement: flash attention alone", Config{ContextTokens: 4096, attention: attnFlash}, shape06B, cpuSchedule, sizes{
			ctxTokens: 4096, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingLast,
			short:    contextSize{kernel: attnFlash, ctxTokens: 4096, batchTokens: 512, maxSeqs: 64},
			shortMax: 4096,
		}},
		{"encoder: sequences of up to EncoderPackMaxTokens packed with flash attention, longer ones alone in a call of the context", Config{}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			shortMax: EncoderPackMaxTokens,
		}},
		{"encoder, pooling overridden, small calls: the short context holds one call", Config{BatchTokens: 64, Pooling: gguf.PoolingCLS}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 64, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingCLS, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 64, batchTokens: 64, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			shortMax: EncoderPackMaxTokens,
		}},
		{"encoder, calls smaller than EncoderPackMaxTokens: a call bounds what is packed", Config{BatchTokens: 16}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 16, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 16, batchTokens: 16, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			shortMax: 16,
		}},
		{"encoder context of at most EncoderPackMaxTokens: no long context", Config{ContextTokens: EncoderPackMaxTokens}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: EncoderPackMaxTokens, batchTokens: EncoderPackMaxTokens, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: EncoderPackMaxTokens, batchTokens: EncoderPackMaxTokens, maxSeqs: 64},
			shortMax: EncoderPackMaxTokens,
		}},
		{"encoder context of FlashMaxTokens: longer sequences alone", Config{ContextTokens: 128}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 128, batchTokens: 128, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 128, batchTokens: 128, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 128, batchTokens: 128, maxSeqs: 1},
			shortMax: EncoderPackMaxTokens,
		}},
		{"encoder on a GPU: sequences of up to 512 tokens packed", Config{}, shapeMiniLM, gpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 128, threads: gpuThreads, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 512, batchTokens: 512, maxSeqs: 128},
			shortMax: 512,
		}},
		{"measurement: an encoder packing up to 64 tokens", Config{encoderPack: 64}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnFlash, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			long:     &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			shortMax: 64,
		}},
		{"measurement: an encoder packing nothing, every sequence alone", Config{encoderPack: -1}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short: contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			long:  &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
		}},
		{"t5encoder: no flash attention, every sequence alone", Config{}, gguf.Shape{Architecture: "t5encoder", ContextLength: 512, Heads: 8, Pooling: gguf.PoolingMean}, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short: contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
			long:  &contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 1},
		}},
		{"measurement: an encoder with plain attention, packed", Config{attention: attnPlain}, shapeMiniLM, cpuSchedule, sizes{
			ctxTokens: 512, batchTokens: 512, maxSeqs: 64, threads: cpus, gpuLayers: 999, pooling: gguf.PoolingMean, encoder: true,
			short:    contextSize{kernel: attnPlain, ctxTokens: 512, batchTokens: 512, maxSeqs: 64},
			shortMax: 512,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := resolve(tt.cfg, tt.shape, tt.sched)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("resolve =\n%+v (long %+v, short jobs %+v)\nwant\n%+v (long %+v, short jobs %+v)",
					got, got.long, got.shortJobs, tt.want, tt.want.long, tt.want.shortJobs)
			}
		})
	}
}

func TestResolveErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"context above training", Config{ContextTokens: 32769}, "Config.ContextTokens is 32769 but the model was trained on at most 32768 tokens"},
		{"batch above context", Config{ContextTokens: 256, BatchTokens: 512}, "Config.BatchTokens is 512, more than ContextTokens 256"},
		{"negative threads", Config{Threads: -1}, "Config.Threads is -1; it must be 0 (default) or positive"},
		{"negative attention bytes", Config{AttentionBytes: -1}, "Config.AttentionBytes is -1"},
		{"nice above 19", Config{Nice: 20}, "Config.Nice is 20; it must be 0 to 19"},
	}
	// jina-embeddings-v2's shape: 8192 tokens, 12 heads.
	jina := gguf.Shape{Architecture: "jina-bert-v2", ContextLength: 8192, Heads: 12, Pooling: gguf.PoolingMean, EmbeddingLength: 768}
	jinaPooled := jina
	jinaPooled.HasClassifier, jinaPooled.ClassifierDims, jinaPooled.DenseDims = true, []uint64{768, 1}, []uint64{768, 768}
	// jina-reranker-v1's layout resolves, to [CLS] pooling.
	jinaReranker := jina
	jinaReranker.DenseDims = []uint64{768, 1}
	if z, err := resolve(Config{Rerank: true, ContextTokens: 512}, jinaReranker, cpuSchedule); err != nil || z.pooling != gguf.PoolingCLS {
		t.Errorf("a jina-bert-v2 cross-encoder with a one-row cls.weight: pooling %s, %v; want cls", z.pooling, err)
	}
	for _, tt := range []struct {
		name  string
		cfg   Config
		shape gguf.Shape
		want  string
	}{
		{"encoder attention above the budget", Config{}, jina, "at Config.ContextTokens 8192 the attention scores of one call take 3072 MiB, more than AttentionBytes (512 MiB); lower ContextTokens to 3328"},
		{"a reranker of an encoder without a classifier head", Config{Rerank: true, ContextTokens: 512}, jina, "llama: Config.Rerank: a jina-bert-v2 cross-encoder: it has no classifier head (cls.weight, one row), so there is nothing to score a pair with"},
		{"a jina-bert-v2 reranker with a pooler's head", Config{Rerank: true, ContextTokens: 512}, jinaPooled,
			"llama: Config.Rerank: a jina-bert-v2 cross-encoder: it has cls.output.weight, which llama.cpp's jina-bert-v2 does not load (its classifier is a one-row cls.weight)"},
		{"a reranker of an encoder llama.cpp loads no head for", Config{Rerank: true, ContextTokens: 512},
			gguf.Shape{Architecture: "nomic-bert", ContextLength: 2048, Heads: 12, EmbeddingLength: 768, HasClassifier: true, ClassifierDims: []uint64{768, 1}},
			"llama: Config.Rerank: a nomic-bert cross-encoder: llama.cpp loads no classifier head for nomic-bert, so its rank pooling cannot score a pair; embed-stack reranks with Qwen3-Reranker models and the cross-encoders of bert (bge-reranker, ms-marco MiniLM), neo-bert and jina-bert-v2 (jina-reranker-v1)"},
		{"rank pooling declared", Config{}, gguf.Shape{Architecture: "bert", Pooling: gguf.PoolingRank}, "the model declares pooling type 4 (rank); the engine pools mean, cls or last"},
		{"rank pooling asked", Config{Pooling: gguf.PoolingRank}, shapeMiniLM, "Config.Pooling is 4 (rank)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.check()
			if err == nil {
				_, err = resolve(tt.cfg, tt.shape, cpuSchedule)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.check()
			if err == nil {
				_, err = resolve(tt.cfg, shape06B, cpuSchedule)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestAttentionCrossover: the position where a token's attention costs what its
// matrix products do, for the 0.6B shape (the weights of its 28 layers' matrices
// and norms; the token-embedding table is a lookup).
func TestAttentionCrossover(t *testing.T) {
	linear := int64(28*(1024*2048+2*1024*1024+2048*1024+3*1024*3072) + 28*(2*1024+2*128) + 1024)
	params := linear + int64(shape06B.VocabSize)*1024
	// 2 x 28 layers x 16 heads x 128 = 114688 FLOPs per cell.
	if got, want := attentionCrossover(shape06B, params), int(linear/114688); got != want || got != 3840 {
		t.Errorf("attentionCrossover = %d, want %d (3840)", got, want)
	}
	if got := attentionCrossover(gguf.Shape{}, params); got != 0 {
		t.Errorf("attentionCrossover of an unknown shape = %d, want 0", got)
	}
}
