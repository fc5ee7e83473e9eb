package server

import (
	"fmt"
	"net/http"
)

// textsItem names element i of the native API's "texts" in messages: "texts[2]".
func textsItem(i int) string { return fmt.Sprintf("texts[%d]", i) }

// checkNativeText refuses the uses of "text" that would be silent guesses: on POST
// /embed, whose field is "texts" (a client that sends "text" there has mistaken the
// API, and a string for an array), and beside "texts" on POST /tokenize, where
// it is unclear which the caller meant.
func checkNativeText(nr nativeRequest, acceptText bool) error {
	switch {
	case nr.Text == nil:
		return nil
	case !acceptText:
		return &statusError{status: http.StatusBadRequest, param: "text",
			msg: "POST /embed takes 'texts', an array of strings; 'text' is a field of POST /tokenize only."}
	case nr.Texts != nil:
		return &statusError{status: http.StatusBadRequest, param: "text",
			msg: "Send 'text' (one string) or 'texts' (an array of strings), not both."}
	}
	return nil
}
