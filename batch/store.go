package batch

import (
	"context"
	"encoding/json"
)

// Store is an output that is a database reached over the network (a Chroma
// collection) rather than a file: the job writes each batch's records to it and, to
// resume, asks it which of the input's ids it already holds. Package batch/chroma
// is one; Qdrant or pgvector would be others.
//
// The store itself is the job's record of progress. A file output is read back at
// the start; a store is asked batch by batch, before a batch is embedded, which of its
// ids it holds, and those items are skipped (counted as resumed). A kill can come
// between the store taking a batch and the job knowing it, so Write must be
// idempotent by id, an upsert: a batch written again on resume replaces each of its
// records with the same vector (vectors do not depend on batching), and a store keeps
// one record per id, so nothing is duplicated. What a store held before the run
// under ids the input lacks is never touched: a collection may be shared.
//
// Ids reach a store as text (IDText): a store's ids are strings, so the job
// compares input ids as text and refuses "7" beside 7 as a repeated id.
type Store interface {
	// Open readies the store for dim-dimensional vectors (creating the collection
	// if need be) and refuses one that holds vectors of another dimension. The
	// embed command calls it before its worker loads the model, so an unreachable
	// store fails in seconds.
	Open(ctx context.Context, dim int) error
	// Has reports, for each id, whether the store holds a record of it.
	Has(ctx context.Context, ids []string) ([]bool, error)
	// Write stores the records, replacing any of the same ids.
	Write(ctx context.Context, recs []Record) error
	// String names the store in logs and messages, without credentials. The
	// errors of Open, Has and Write start with it.
	String() string
}

// Record is one item's vector on its way to a Store.
type Record struct {
	// ID is the item's id as text (IDText).
	ID string
	// Item is the input item: its text, line and passthrough fields.
	Item   Item
	Vector []float32
}

// IDText is the text form of an item's id (a compact JSON string or number): a
// string's value, a number as written. It is how a .parquet id column and a Store
// hold ids.
func IDText(id json.RawMessage) string { return string(jsonText(id)) }
