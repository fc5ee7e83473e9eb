package batch

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
)

// idKey is an id's identity in the index: the first 16 bytes of the SHA-256 of its
// compact JSON. Two different ids share a key with probability about n²/2¹²⁹ (10⁻²⁵
// for ten million ids), so the index is exact in practice, and a key is 16 bytes
// however long the id is.
type idKey [16]byte

func keyOf(id json.RawMessage) idKey {
	s := sha256.Sum256(id)
	return idKey(s[:16])
}

// idEntry is what the index knows of one id.
type idEntry struct {
	// line is the input line that holds the id, 0 while the input has not reached it.
	line int64
	// row is the id's row in the output as this run found it, -1 when it had none.
	row int64
}

// idIndex holds every id of the input read so far and of the output found at the
// start, so that a run writes each id exactly once: an input id seen before is
// refused (a resume by id could not tell the two items apart), an id the output
// already holds is skipped, and output rows that repeat an earlier row's id or whose
// id the input never held are dropped when the run completes. It costs 84 MB of
// heap for a million ids (measured); shard bigger inputs (see Shard). Used by the
// reader goroutine during a run, then by Run after it.
type idIndex struct {
	m map[idKey]idEntry
	// text keys ids by their text (jsonText) rather than their JSON: a Parquet id
	// column is a string, so the ids "7" and 7 would be one id there.
	text bool
	// dupRows are the output rows found at the start whose id an earlier row holds.
	dupRows []int64
	// firstDup is the id of dupRows[0], for the log.
	firstDup json.RawMessage
}

func newIDIndex() *idIndex { return &idIndex{m: make(map[idKey]idEntry)} }

func (x *idIndex) key(id json.RawMessage) idKey {
	if x.text {
		return keyOf(jsonText(id))
	}
	return keyOf(id)
}

// addRow records that output row holds id.
func (x *idIndex) addRow(row int64, id json.RawMessage) {
	k := x.key(id)
	if _, ok := x.m[k]; ok {
		if len(x.dupRows) == 0 {
			x.firstDup = append(json.RawMessage(nil), id...)
		}
		x.dupRows = append(x.dupRows, row)
		return
	}
	x.m[k] = idEntry{row: row}
}

// see records that input line holds id. It returns whether the output already holds
// it, or a *LineError when an earlier line holds the same id.
func (x *idIndex) see(id json.RawMessage, line int64) (written bool, err error) {
	k := x.key(id)
	e, ok := x.m[k]
	if !ok {
		x.m[k] = idEntry{line: line, row: -1}
		return false, nil
	}
	if e.line != 0 {
		how := ""
		if x.text && isNumberText(jsonText(id)) {
			how = ` (as text, which a .parquet or .npy output holds: "7" and 7 are one id there)`
		}
		return false, &LineError{Line: line, Repeats: e.line, Msg: fmt.Sprintf("repeats the id %s of line %d%s: every id must be unique, since the output holds each id once", id, e.line, how)}
	}
	e.line = line
	x.m[k] = e
	return e.row >= 0, nil
}

// dropRows returns, in order, the output rows found at the start that must go: those
// repeating an earlier row's id, and those whose id the input did not hold (valid only
// once the whole input is read). foreign is how many are of the second kind.
func (x *idIndex) dropRows() (rows []int64, foreign int64) {
	rows = append(rows, x.dupRows...)
	for _, e := range x.m {
		if e.row >= 0 && e.line == 0 {
			rows = append(rows, e.row)
			foreign++
		}
	}
	slices.Sort(rows)
	return rows, foreign
}

// isNumberText says whether an id's text reads as a JSON number: only such an id can
// repeat another as text while differing in its JSON ("7" and 7).
func isNumberText(t []byte) bool {
	var n json.Number
	return len(t) > 0 && t[0] != '"' && json.Unmarshal(t, &n) == nil
}
