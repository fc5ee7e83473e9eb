// Package chroma writes the batch job's vectors into a Chroma collection: a
// batch.Store speaking Chroma's HTTP API (v2, as the pinned chromadb 1.5 server
// serves it: tenants, databases, collections, get and upsert; its OpenAPI document
// is at /openapi.json on any server).
//
// Records are upserted, never added: a batch written again after a kill replaces
// its records with the same vectors, so a resumed job leaves each id exactly once
// (batch.Store says why that is the job's whole record of progress). Vectors travel
// as base64 of little-endian float32, bit for bit, when the server says it takes
// them (GET /api/v2/pre-flight-checks), else as JSON floats written exactly.
//
// The package refuses to know how vectors are made or read: it gets records from
// package batch and hands them to the server.
package chroma

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/embed-stack/embed-stack/batch"
)

// Scheme is the URL scheme that names a Chroma collection as the embed command's
// --output: chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D].
const Scheme = "chroma"

// Defaults of a URL's parts and of the zero Store fields.
const (
	DefaultPort     = "8000"
	DefaultTenant   = "default_tenant"
	DefaultDatabase = "default_database"
	// DefaultAttempts is how many times a request that failed for want of the
	// server (no connection, 429, 5xx) is tried, with waits of 0.5, 1, 2 and 4 s
	// between: a server restarting gets about 8 s.
	DefaultAttempts = 5
	// DefaultTimeout bounds one request, so that a server that stops answering
	// stops the job instead of hanging it.
	DefaultTimeout = 2 * time.Minute
)

// Store is one Chroma collection. Set the fields (ParseURL fills the address), then
// Open it. Safe for concurrent use once opened.
type Store struct {
	// BaseURL is the server's address, such as http://127.0.0.1:8000.
	BaseURL string
	// Tenant and Database hold the collection; "" means Chroma's defaults. Both
	// must exist: a misspelt name is refused, not created.
	Tenant, Database string
	// Collection is the collection's name, created (inner product, see Open) when missing.
	Collection string
	// Documents stores each item's text as its record's document.
	Documents bool
	// Job, when set, says what makes the job's vectors (batch.JobRecord): a
	// collection Open creates keeps it in its metadata (JobMetadataKey), and a
	// collection that holds records of another job is refused.
	Job *batch.JobRecord
	// Client sends the requests; nil means a client with no overall timeout (each
	// request has Timeout).
	Client *http.Client
	// Attempts is how many times a request is tried when the server is unreachable
	// or answers 429 or 5xx (0: DefaultAttempts); Timeout bounds each try (0:
	// DefaultTimeout).
	Attempts int
	Timeout  time.Duration
	// Logger receives the collection's state at Open and each retry; nil means
	// slog.Default().
	Logger *slog.Logger

	// Set by Open.
	id       string // the collection's UUID, which the record routes take
	maxBatch int    // most records per upsert (the server's max_batch_size)
	base64   bool   // the server takes base64 vectors
	// wait is the pause before retry i (a test shortens it).
	wait func(i int) time.Duration
}

var _ batch.Store = (*Store)(nil)

// IsURL says whether an --output names a Chroma collection.
func IsURL(s string) bool { return strings.HasPrefix(s, Scheme+"://") }

// ParseURL reads chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D]. The port
// defaults to 8000, as `chroma run` serves. It refuses a collection name Chroma
// would refuse (3 to 512 of [a-zA-Z0-9._-], starting and ending with a letter or a
// digit), so a typo fails before the model loads.
func ParseURL(s string) (*Store, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("--output %s: %w", s, err)
	}
	usage := "want chroma://HOST[:PORT]/COLLECTION[?tenant=T&database=D]"
	if u.Scheme != Scheme || u.Host == "" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("--output %s: %s", s, usage)
	}
	name := strings.TrimPrefix(u.Path, "/")
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--output %s: the path must be one collection name; %s", s, usage)
	}
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("--output %s: Chroma refuses the collection name %q: it takes 3 to 512 of a-z, A-Z, 0-9, '.', '_' and '-', starting and ending with a letter or a digit", s, name)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), DefaultPort)
	}
	st := &Store{BaseURL: "http://" + host, Collection: name, Tenant: DefaultTenant, Database: DefaultDatabase}
	for k, v := range u.Query() {
		switch {
		case len(v) != 1 || v[0] == "":
			return nil, fmt.Errorf("--output %s: give %s once, not empty", s, k)
		case k == "tenant":
			st.Tenant = v[0]
		case k == "database":
			st.Database = v[0]
		default:
			return nil, fmt.Errorf("--output %s: unknown parameter %q (tenant or database)", s, k)
		}
	}
	return st, nil
}

var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{1,510}[a-zA-Z0-9]$`)

// String names the collection and the server.
func (s *Store) String() string {
	where := s.Collection
	if s.tenant() != DefaultTenant || s.database() != DefaultDatabase {
		where = s.tenant() + "/" + s.database() + "/" + s.Collection
	}
	return fmt.Sprintf("Chroma collection %s at %s", where, s.BaseURL)
}

func (s *Store) tenant() string   { return cmpOr(s.Tenant, DefaultTenant) }
func (s *Store) database() string { return cmpOr(s.Database, DefaultDatabase) }

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (s *Store) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.Default()
	}
	return s.Logger
}

// collectionsPath is the route of the database's collections.
func (s *Store) collectionsPath() string {
	return "/api/v2/tenants/" + url.PathEscape(s.tenant()) + "/databases/" + url.PathEscape(s.database()) + "/collections"
}

// collection is the part of Chroma's Collection the store reads.
// JobMetadataKey is the collection metadata key of the job record (Store.Job).
const JobMetadataKey = "embed_stack_job"

type collection struct {
	ID        string         `json:"id"`
	Name      string         `json:"name"`
	Dimension *int           `json:"dimension"`
	Metadata  map[string]any `json:"metadata"`
	Config    struct {
		HNSW *struct {
			Space string `json:"space"`
		} `json:"hnsw"`
	} `json:"configuration_json"`
}

// Open checks that the server answers, creates the collection when it is missing
// and refuses one that holds vectors of another dimension.
//
// A collection it creates measures inner product ("ip"). The job's vectors are
// L2-normalised, so Chroma's ip distance, 1 - dot, is the cosine distance and ranks
// as cosine and L2 do; but Chroma's "cosine" space stores a renormalised copy of each
// vector (off by an ulp here and there), and "ip" keeps the job's vectors bit for bit.
func (s *Store) Open(ctx context.Context, dim int) error {
	var pre struct {
		MaxBatchSize int  `json:"max_batch_size"`
		Base64       bool `json:"supports_base64_encoding"`
	}
	if err := s.call(ctx, http.MethodGet, "/api/v2/pre-flight-checks", nil, &pre); err != nil {
		return err
	}
	s.maxBatch, s.base64 = pre.MaxBatchSize, pre.Base64
	if s.maxBatch <= 0 {
		s.maxBatch = 1000
	}
	var c collection
	existed := true
	err := s.call(ctx, http.MethodGet, s.collectionsPath()+"/"+url.PathEscape(s.Collection), nil, &c)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound && ae.Kind == "NotFoundError" {
		existed = false
		// get_or_create: shards starting together all get the one collection.
		req := map[string]any{"name": s.Collection, "get_or_create": true,
			"configuration": map[string]any{"hnsw": map[string]any{"space": "ip"}}}
		if job := s.jobText(); job != "" {
			req["metadata"] = map[string]any{JobMetadataKey: job}
		}
		err = s.call(ctx, http.MethodPost, s.collectionsPath(), req, &c)
	}
	if err != nil {
		return err
	}
	if c.ID == "" {
		return fmt.Errorf("%s: the server gave the collection no id", s)
	}
	s.id = c.ID
	if c.Dimension != nil && *c.Dimension != dim {
		return fmt.Errorf("%s holds %d-dimensional vectors and this job makes %d: a collection holds one dimension (and one model's vectors); choose another collection, or --dimensions %d", s, *c.Dimension, dim, *c.Dimension)
	}
	space := "l2"
	if c.Config.HNSW != nil && c.Config.HNSW.Space != "" {
		space = c.Config.HNSW.Space
	}
	var count int64
	if err := s.call(ctx, http.MethodGet, s.recordsPath("count"), nil, &count); err != nil {
		return err
	}
	if err := s.checkJob(c, count); err != nil {
		return err
	}
	s.logger().Info("chroma collection ready", "collection", s.Collection, "id", c.ID, "created", !existed, "records", count, "space", space, "base64_vectors", s.base64, "server", s.BaseURL)
	return nil
}

// jobText is Store.Job as the collection's metadata holds it, without the first
// text's digest (the shards of one job start with other texts); "" without a job.
func (s *Store) jobText() string {
	if s.Job == nil {
		return ""
	}
	j := *s.Job
	j.FirstText = ""
	b, err := json.Marshal(j)
	if err != nil {
		return ""
	}
	return string(b)
}

// checkJob refuses a collection that holds records of another job than Store.Job
// (another model, pooling, input type, prompt or dimensions: their vectors side by
// side answer queries wrongly), naming each difference.
func (s *Store) checkJob(c collection, count int64) error {
	if s.Job == nil || count == 0 {
		return nil
	}
	text, _ := c.Metadata[JobMetadataKey].(string)
	if text == "" {
		s.logger().Warn("the collection has no job record (made by something else, or an older embed-stack): its vectors cannot be checked against this job's model and settings", "collection", s.Collection)
		return nil
	}
	var held batch.JobRecord
	if err := json.Unmarshal([]byte(text), &held); err != nil {
		return fmt.Errorf("%s: its metadata %s is not a job record: %w", s, JobMetadataKey, err)
	}
	if diffs := s.Job.Differences(&held); len(diffs) > 0 {
		return fmt.Errorf("%s holds %d records of another job: %s; choose another collection (one holds one model's vectors), or delete this one", s, count, strings.Join(diffs, ", "))
	}
	return nil
}

func (s *Store) recordsPath(op string) string {
	return s.collectionsPath() + "/" + url.PathEscape(s.id) + "/" + op
}

// Has asks which ids the collection holds.
func (s *Store) Has(ctx context.Context, ids []string) ([]bool, error) {
	held := make(map[string]bool, len(ids))
	for start := 0; start < len(ids); start += s.maxBatch {
		chunk := ids[start:min(start+s.maxBatch, len(ids))]
		var res struct {
			IDs []string `json:"ids"`
		}
		req := map[string]any{"ids": chunk, "include": []string{}}
		if err := s.call(ctx, http.MethodPost, s.recordsPath("get"), req, &res); err != nil {
			return nil, err
		}
		for _, id := range res.IDs {
			held[id] = true
		}
	}
	out := make([]bool, len(ids))
	for i, id := range ids {
		out[i] = held[id]
	}
	return out, nil
}

// upsert is Chroma's UpsertCollectionRecordsPayload.
type upsert struct {
	IDs        []string          `json:"ids"`
	Embeddings []json.RawMessage `json:"embeddings"`
	Metadatas  []json.RawMessage `json:"metadatas"`
	Documents  []*string         `json:"documents,omitempty"`
}

// Write upserts the records, at most the server's max_batch_size per request. A
// refusal names the input line of the record it points at, when Chroma's message
// points at one ("metadatas[3]").
func (s *Store) Write(ctx context.Context, recs []batch.Record) error {
	for start := 0; start < len(recs); start += s.maxBatch {
		chunk := recs[start:min(start+s.maxBatch, len(recs))]
		req := upsert{IDs: make([]string, len(chunk)), Embeddings: make([]json.RawMessage, len(chunk)), Metadatas: make([]json.RawMessage, len(chunk))}
		if s.Documents {
			req.Documents = make([]*string, len(chunk))
		}
		for i, r := range chunk {
			req.IDs[i] = r.ID
			req.Embeddings[i] = s.vector(r.Vector)
			req.Metadatas[i] = Metadata(r.Item.Fields)
			if s.Documents {
				req.Documents[i] = &chunk[i].Item.Text
			}
		}
		if err := s.call(ctx, http.MethodPost, s.recordsPath("upsert"), req, nil); err != nil {
			var ae *APIError
			if errors.As(err, &ae) {
				if i, ok := recordIndex(ae.Message); ok && i < len(chunk) {
					return fmt.Errorf("%w (record %d of the request is input line %d, id %q)", err, i, chunk[i].Item.Line, chunk[i].ID)
				}
			}
			return err
		}
	}
	return nil
}

// vector encodes v as the server takes it: base64 of little-endian float32, or
// JSON numbers that read back as the same float32.
func (s *Store) vector(v []float32) json.RawMessage {
	if s.base64 {
		b := make([]byte, 0, 4*len(v))
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
		}
		return json.RawMessage(strconv.Quote(base64.StdEncoding.EncodeToString(b)))
	}
	b := []byte{'['}
	for i, x := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(x), 'g', -1, 32)
	}
	return append(b, ']')
}

// recordPointer finds the index Chroma's messages give a record by:
// "metadatas[3].n: …", "Invalid metadata at index 3".
var recordPointer = regexp.MustCompile(`(?:(?:ids|embeddings|metadatas|documents)\[(\d+)\]|at index (\d+))`)

func recordIndex(msg string) (int, bool) {
	m := recordPointer.FindStringSubmatch(msg)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1] + m[2])
	return n, err == nil
}

// Metadata is a record's metadata from an item's passthrough fields, or JSON null
// when it has none. What Chroma holds natively passes as it is: strings, numbers,
// booleans, and arrays of one of those kinds (numbers of any form count as one
// kind). A JSON null and an empty array are left out (Chroma has neither); objects
// and other arrays, which Chroma refuses, become their compact JSON text.
func Metadata(fields map[string]json.RawMessage) json.RawMessage {
	m := make(map[string]json.RawMessage, len(fields))
	for k, v := range fields {
		v = bytes.TrimSpace(v)
		switch kindOf(v) {
		case kindNull:
			continue
		case kindOther:
			var b bytes.Buffer
			if json.Compact(&b, v) == nil {
				v = b.Bytes()
			}
			v, _ = json.Marshal(string(v))
		}
		m[k] = v
	}
	if len(m) == 0 {
		return json.RawMessage("null")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return json.RawMessage("null") // the reader only passes valid JSON
	}
	return b
}

type kind int

const (
	kindNull kind = iota
	kindString
	kindNumber
	kindBool
	kindArray // of one scalar kind
	kindOther
)

func kindOf(v json.RawMessage) kind {
	if len(v) == 0 {
		return kindNull
	}
	switch c := v[0]; {
	case c == 'n':
		return kindNull
	case c == '"':
		return kindString
	case c == 't' || c == 'f':
		return kindBool
	case c == '-' || c >= '0' && c <= '9':
		return kindNumber
	case c == '[':
		var elems []json.RawMessage
		if json.Unmarshal(v, &elems) != nil {
			return kindOther
		}
		if len(elems) == 0 {
			return kindNull // no values, as Chroma, which has no empty list, can say
		}
		first := kindOf(bytes.TrimSpace(elems[0]))
		if first != kindString && first != kindNumber && first != kindBool {
			return kindOther
		}
		for _, e := range elems[1:] {
			if kindOf(bytes.TrimSpace(e)) != first {
				return kindOther
			}
		}
		return kindArray
	}
	return kindOther
}
