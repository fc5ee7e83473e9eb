// Package batch runs an offline embedding job: it streams items (an id and a text)
// from plain lines or JSONL, embeds them a batch at a time through an Embedder, and
// streams the vectors in input order to JSONL ({"id":…,"embedding":[…]}) or to a
// float32 .npy file (shape [N, dim]) with a sidecar of ids. A few batches at most are
// in memory at any time, so a multi-gigabyte input costs no more memory than a small
// one.
//
// A job is resumable: the output is written in input order and flushed batch by
// batch, so after an interruption it holds the vectors of a prefix of the work. Run
// again with the same input and output, the job truncates a partly written last
// record, then walks the input and the ids already in the output side by side,
// skipping each input item whose id is the next one already written. This needs no
// memory per item (no set of ids), and an input that gained items since (or whose
// earlier items failed and were skipped) gets exactly the missing ones embedded.
//
// Output formats:
//
//	JSONL  one {"id":ID,"embedding":[f32,…]} per line; ID is the input's id value as
//	       written there (a JSON string or number), or the line number (1-based) for
//	       plain-line input. Floats are the shortest decimal that reads back as the
//	       same float32.
//	.npy   NumPy format 1.0, '<f4', C order, shape (N, dim), with a fixed 128-byte
//	       header that is rewritten after every batch, so the file loads with
//	       numpy.load even while a job runs or after it was killed. Row i belongs to
//	       the id on line i+1 of the sidecar FILE.npy.ids (one JSON id per line).
//
// The package refuses to know how vectors are made (routing, worker processes,
// HTTP) and where its configuration comes from: the embed command wires those.
package batch
