package tokenizer

import (
	"bufio"
	"encoding/base64"
	"io"
	"strconv"
)

// Cl100kTiktokenCacheKey is the name Python's tiktoken gives its cached copy of the
// cl100k_base vocabulary file: the SHA-1 of the URL it downloads the file from. A
// file of that name in TIKTOKEN_CACHE_DIR is used without any download.
const Cl100kTiktokenCacheKey = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"

// Cl100kTiktokenSHA256 is the SHA-256 tiktoken requires of that file; a cached file
// with another hash is deleted and downloaded again.
const Cl100kTiktokenSHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"

// WriteCl100kTiktoken writes the cl100k_base vocabulary in tiktoken's own file format,
// one ordinary token per line in rank order: its bytes in base64, a space, its id.
// The result is byte for byte the file Python's tiktoken (and so LangChain's
// OpenAIEmbeddings) downloads on first use, built from the vocabulary the server
// decodes token ids with, so that machines which cannot reach that download (CI,
// air-gapped users) can put it in TIKTOKEN_CACHE_DIR under Cl100kTiktokenCacheKey.
// Special tokens are not part of the file; tiktoken adds them itself.
func WriteCl100kTiktoken(w io.Writer) error {
	pieces, err := cl100kPieces()
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	buf := make([]byte, 0, 64)
	for id, piece := range pieces[:cl100kOrdinary] {
		buf = base64.StdEncoding.AppendEncode(buf[:0], []byte(piece))
		buf = append(buf, ' ')
		buf = strconv.AppendInt(buf, int64(id), 10)
		buf = append(buf, '\n')
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}
