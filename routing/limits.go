package routing

// Limits are a router's effective request limits, defaults applied: what GET /info
// and the OpenAPI document report.
type Limits struct {
	Dim                 int `json:"dimensions"`
	MinDimensions       int `json:"min_dimensions"`
	MaxInputs           int `json:"max_inputs"`
	MaxTotalTokens      int `json:"max_total_tokens"`
	MaxInputTokens      int `json:"max_input_tokens"`
	MaxInstructionBytes int `json:"max_instruction_bytes"`
}

// Limits reports the limits requests are checked against.
func (r *Router) Limits() Limits {
	c := r.Config
	return Limits{
		Dim:                 c.Dim,
		MinDimensions:       c.minDimensions(),
		MaxInputs:           c.maxInputs(),
		MaxTotalTokens:      c.maxTotalTokens(),
		MaxInputTokens:      r.inputLimit(),
		MaxInstructionBytes: c.maxInstructionLen(),
	}
}

// DefaultInstruction is the instruction a query gets when its request gives none
// (Config.DefaultInstruction, else the prompts'); "" where the query prompt takes
// none.
func (r *Router) DefaultInstruction() string {
	if !r.Config.Prompts.TakesInstruction() {
		return ""
	}
	return r.Config.instruction()
}
