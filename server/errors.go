package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/embed-stack/embed-stack/ollamaapi"
	"github.com/embed-stack/embed-stack/openai"
	"github.com/embed-stack/embed-stack/routing"
	"github.com/embed-stack/embed-stack/teiapi"
)

// statusError is an error decided at the HTTP edge (unknown model, body too large,
// unknown route) that already knows its status.
type statusError struct {
	status int
	param  string
	code   string
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// StatusClientClosed is nginx's code for a client that went away before the answer;
// it is only ever logged, since nobody is left to read it.
const StatusClientClosed = 499

// errorResponse is the one mapping from errors to HTTP statuses and OpenAI's
// envelope. Every handler reports failures through writeError, which calls it.
func errorResponse(err error) (int, openai.ErrorBody, http.Header) {
	var (
		decodeErr *openai.DecodeError
		inputErr  *routing.InputError
		statusErr *statusError
		tooLarge  *http.MaxBytesError
		overload  *overloadError
		unavail   *routing.UnavailableError
		busy      *routing.BusyError
		encoding  *encodingError
		budget    *bodyBudgetError
		// The decoders of the other APIs (their words; dialectError gives their shape).
		ollamaDecode *ollamaapi.DecodeError
		teiDecode    *teiapi.DecodeError
		teiInvalid   *teiapi.ValidationError
	)
	switch {
	case errors.As(err, &statusErr):
		typ := openai.TypeInvalidRequest
		if statusErr.status >= 500 {
			typ = openai.TypeServer
		}
		return statusErr.status, openai.NewError(typ, statusErr.msg, statusErr.param, statusErr.code), nil
	case errors.As(err, &overload):
		h := http.Header{"Retry-After": []string{strconv.Itoa(retrySeconds(overload.retryAfter))}}
		return http.StatusTooManyRequests, openai.NewError(openai.TypeRateLimit, overload.Error(), "", "rate_limit_exceeded"), h
	case errors.As(err, &busy):
		h := http.Header{"Retry-After": []string{strconv.Itoa(retrySeconds(busy.RetryAfter))}}
		return http.StatusTooManyRequests, openai.NewError(openai.TypeRateLimit, busy.Error(), "", "rate_limit_exceeded"), h
	case errors.As(err, &budget):
		h := http.Header{"Retry-After": []string{strconv.Itoa(retrySeconds(overloadRetryAfter))}}
		return http.StatusTooManyRequests, openai.NewError(openai.TypeRateLimit,
			"The server is reading its limit of request bodies ("+strconv.FormatInt(budget.budget, 10)+" bytes: --max-concurrent-requests × --max-body-bytes); retry after 1s.", "", "rate_limit_exceeded"), h
	case errors.Is(err, errTooManyConnections):
		h := http.Header{"Retry-After": []string{"1"}}
		return http.StatusServiceUnavailable, openai.NewError(openai.TypeServer,
			"The server has its limit of open connections (--max-connections); retry after 1s.", "", "too_many_connections"), h
	case errors.Is(err, errBodyTimeout):
		return http.StatusRequestTimeout, openai.NewError(openai.TypeInvalidRequest,
			"The request body did not arrive within the server's body timeout (--body-timeout).", "", "body_timeout"), nil
	case errors.Is(err, errClientGone):
		return StatusClientClosed, openai.NewError(openai.TypeInvalidRequest, "The client closed the request.", "", "client_closed"), nil
	case errors.Is(err, errBodyIncomplete):
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest,
			"The request body ended before it was complete (shorter than its Content-Length, or broken chunked encoding).", "", "incomplete_body"), nil
	case errors.As(err, &encoding) && encoding.bad:
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest,
			"We could not decompress the "+encoding.encoding+" request body: "+encoding.err.Error()+".", "", "invalid_encoding"), nil
	case errors.As(err, &encoding):
		return http.StatusUnsupportedMediaType, openai.NewError(openai.TypeInvalidRequest,
			"Content-Encoding "+strconv.Quote(encoding.encoding)+" is not supported; send the body uncompressed or with Content-Encoding: gzip.", "", "unsupported_encoding"), nil
	case errors.As(err, &decodeErr):
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, decodeErr.Message, decodeErr.Param, ""), nil
	case errors.As(err, &ollamaDecode):
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, ollamaDecode.Message, "", ""), nil
	case errors.Is(err, ollamaapi.ErrModelRequired):
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, err.Error(), "model", ""), nil
	case errors.As(err, &teiDecode) && teiDecode.Syntax:
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, teiDecode.Message, "", ""), nil
	case errors.As(err, &teiDecode):
		return http.StatusUnprocessableEntity, openai.NewError(openai.TypeInvalidRequest, teiDecode.Message, "", ""), nil
	case errors.As(err, &teiInvalid) && teiInvalid.Type == teiapi.TypeEmpty:
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, teiInvalid.Message, "", routing.CodeEmptyInput), nil
	case errors.As(err, &teiInvalid):
		return http.StatusUnprocessableEntity, openai.NewError(openai.TypeInvalidRequest, teiInvalid.Message, "", routing.CodeInvalidValue), nil
	case errors.As(err, &inputErr):
		return http.StatusBadRequest, openai.NewError(openai.TypeInvalidRequest, inputErr.Message, inputErr.Param, inputErr.Code), nil
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, openai.NewError(openai.TypeInvalidRequest,
			"The request body is larger than the server's limit of "+strconv.FormatInt(tooLarge.Limit, 10)+" bytes (--max-body-bytes).", "", "request_too_large"), nil
	case errors.Is(err, routing.ErrUnavailable):
		retry := 1
		if errors.As(err, &unavail) && unavail.RetryAfter > 0 {
			retry = int(math.Ceil(unavail.RetryAfter.Seconds()))
		}
		h := http.Header{"Retry-After": []string{strconv.Itoa(retry)}}
		return http.StatusServiceUnavailable, openai.NewError(openai.TypeServer,
			"The embedding worker is not ready (starting or restarting); retry after "+strconv.Itoa(retry)+"s.", "", "worker_unavailable"), h
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, openai.NewError(openai.TypeServer, "The request took longer than the server's deadline.", "", "timeout"), nil
	case errors.Is(err, context.Canceled):
		return StatusClientClosed, openai.NewError(openai.TypeInvalidRequest, "The client closed the request.", "", "client_closed"), nil
	}
	// The cause may quote a worker's stderr: it goes to the log (writeError), not to
	// the client.
	return http.StatusInternalServerError, openai.NewError(openai.TypeServer, "The server had an error while processing your request; the server log has the cause.", "", "internal_error"), nil
}

// dialect is the API whose error shape and statuses a request is answered in:
// OpenAI's envelope everywhere, except Ollama's routes and TEI's embed shape.
type dialect int

const (
	dialectOpenAI dialect = iota
	dialectOllama         // {"error": "..."}, Ollama's statuses
	dialectTEI            // {"error": "...", "error_type": "..."}, TEI's statuses
)

// dialectOf is the request's dialect: the one its handler set (POST /embed is TEI's
// once its body holds "inputs"), else Ollama's for the /api/ routes and TEI's for
// POST /, so that refusals before the handler (401, 413, 429) are in the shape
// the client reads too.
func dialectOf(c *gin.Context) dialect {
	if d, ok := c.Get(ctxDialect); ok {
		return d.(dialect)
	}
	switch p := c.Request.URL.Path; {
	case strings.HasPrefix(p, "/api/"):
		return dialectOllama
	case p == "/" && c.Request.Method == http.MethodPost, p == "/embed_all":
		return dialectTEI
	}
	return dialectOpenAI
}

// dialectError turns errorResponse's answer into d's: the status the original
// server uses for the same refusal, and its body, in its words where it has its
// own (the body keeps the cause of errorResponse's message otherwise).
//
// Ollama answers a full queue 503 (not 429) and an input over the context, with
// truncate false, 400 "the input length exceeds the context length". TEI answers
// validation errors 422, an empty input 400 ("Empty"), overload 429
// ("Overloaded"), an unready model 503 ("Unhealthy") and a backend failure 424
// ("Backend").
func dialectError(d dialect, err error, status int, body openai.ErrorBody) (int, any) {
	msg := body.Error.Message
	overloaded := status == http.StatusTooManyRequests
	var inputErr *routing.InputError
	isInput := errors.As(err, &inputErr)
	switch d {
	case dialectOllama:
		if overloaded {
			status = http.StatusServiceUnavailable
		}
		if isInput && inputErr.Code == routing.CodeContextLength {
			msg = "the input length exceeds the context length"
		}
		return status, ollamaapi.ErrorBody{Error: msg}
	case dialectTEI:
		typ := teiapi.TypeValidation
		var teiInvalid *teiapi.ValidationError
		switch {
		case errors.As(err, &teiInvalid):
			typ = teiInvalid.Type
		case overloaded:
			typ, msg = teiapi.TypeOverloaded, "Model is overloaded"
		case status == http.StatusServiceUnavailable:
			typ = teiapi.TypeUnhealthy
		case status == http.StatusInternalServerError:
			status, typ = http.StatusFailedDependency, teiapi.TypeBackend
		case status == http.StatusFailedDependency:
			typ = teiapi.TypeBackend
		case status > http.StatusInternalServerError:
			typ = teiapi.TypeBackend
		case isInput:
			status = http.StatusUnprocessableEntity
			switch {
			case inputErr.Code == routing.CodeEmptyInput:
				status, typ, msg = http.StatusBadRequest, teiapi.TypeEmpty, "Input validation error: `inputs` cannot be empty"
			case inputErr.Code == routing.CodeContextLength && inputErr.AtLeast:
				msg = fmt.Sprintf("Input validation error: `inputs` must have less than %d tokens. Given: more than %d", inputErr.Limit, inputErr.Tokens)
			case inputErr.Code == routing.CodeContextLength && inputErr.Tokens > 0:
				msg = fmt.Sprintf("Input validation error: `inputs` must have less than %d tokens. Given: %d", inputErr.Limit, inputErr.Tokens)
			case inputErr.Code == routing.CodeTooManyInputs:
				msg = fmt.Sprintf("batch size %d > maximum allowed batch size %d", inputErr.Tokens, inputErr.Limit)
			default:
				msg = "Input validation error: " + msg
			}
		}
		return status, teiapi.ErrorBody{Error: msg, ErrorType: typ}
	}
	return status, body
}

func writeError(c *gin.Context, err error) {
	status, body, header := errorResponse(err)
	for k, v := range header {
		c.Writer.Header()[k] = v
	}
	// A body the server could not decode (an unsupported or broken Content-Encoding)
	// may be left partly unread: close the connection after this answer, so that the
	// client's next request does not start on a connection in an unknown state
	// (that request used to be answered 499).
	var enc *encodingError
	if errors.As(err, &enc) {
		c.Writer.Header().Set("Connection", "close")
	}
	c.Set(ctxError, err.Error())
	d := dialectOf(c)
	status, out := dialectError(d, err, status, body)
	recordError(c, err, status, body)
	if d == dialectOpenAI {
		c.AbortWithStatusJSON(status, out)
		return
	}
	// Written as Ollama's and TEI's servers write them: "<" and ">" as they are,
	// not escaped for HTML as gin's JSON does.
	var buf bytes.Buffer
	je := json.NewEncoder(&buf)
	je.SetEscapeHTML(false)
	_ = je.Encode(out) // the bodies are plain structs of strings
	c.Abort()
	c.Data(status, "application/json; charset=utf-8", bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
