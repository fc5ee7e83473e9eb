// Package batch runs an offline embedding job: it streams items (an id and a text)
// from plain lines or JSONL, embeds them a batch at a time through an Embedder, and
// streams the vectors in input order to JSONL ({"id":…,"embedding":[…]}) or to a
// float32 .npy file (shape [N, dim]) with a sidecar of ids. A few batches of texts at
// most are in memory at any time; the job also holds an index of the ids it has seen
// (idIndex, 84 MB for a million ids).
//
// A job is resumable and writes each id exactly once. The output is written in input
// order and flushed batch by batch, so after an interruption it holds the vectors of a
// prefix of the work. Run again with the same input and output, the job truncates a
// partly written last record, indexes the ids of the rest, and embeds only the input
// items whose ids are not there. An id on two input lines is refused (or skipped with
// SkipInvalid): resuming by id could not tell the two apart. Output rows that repeat an
// id, or whose id the input does not hold, are dropped once the whole input is read,
// by rewriting the output through a temporary copy (repair.go).
//
// A job may take one slice of its input (Shard, shard.go): slices are byte ranges
// aligned to lines, so the shards of an input are consecutive runs of its lines and
// Merge joins their outputs in input order, checking that every item has exactly one
// vector. Merge also writes Parquet (parquet.go), which cannot be resumed and so is
// only written from complete parts.
//
// Output formats:
//
//	JSONL    one {"id":ID,"embedding":[f32,…]} per line; ID is the input's id value as
//	         written there (a JSON string or number), or the line number (1-based) for
//	         plain-line input. Floats are the shortest decimal that reads back as the
//	         same float32.
//	.npy     NumPy format 1.0, '<f4', C order, shape (N, dim), with a fixed 128-byte
//	         header that is rewritten after every batch, so the file loads with
//	         numpy.load even while a job runs or after it was killed. Row i belongs to
//	         the id on line i+1 of the sidecar FILE.npy.ids, one id a line as plain
//	         text (a string's value, a number as written); the header's form says so,
//	         and marks older files (and a .parquet job's work file) whose ids are JSON.
//	.parquet id (string), embedding (list<float32>), optional passthrough fields.
//
// Files opens a run's input and names what it writes as the embed command's
// --input, --output and --shard say (a shard's part, a .parquet output's work file)
// and writes a .parquet output once the job is done.
//
// The package refuses to know how vectors are made (routing, worker processes,
// HTTP) and where its configuration comes from: the embed command wires those.
package batch
