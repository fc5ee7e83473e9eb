package openai

// Error types used in the envelope, as OpenAI names them.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypeServer         = "server_error"
	TypeRateLimit      = "rate_limit_error"
)

// ErrorBody is OpenAI's error envelope: {"error":{"message","type","param","code"}}.
// Clients only produce typed errors (go-openai's APIError, the Python SDK's
// APIStatusError) for this exact shape, so every error embed-stack returns uses it.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the inside of the envelope. Param and Code are null when empty.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// NewError builds an envelope; empty param or code become JSON null.
func NewError(typ, message, param, code string) ErrorBody {
	d := ErrorDetail{Message: message, Type: typ}
	if param != "" {
		d.Param = &param
	}
	if code != "" {
		d.Code = &code
	}
	return ErrorBody{Error: d}
}
