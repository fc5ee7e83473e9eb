// Package quantize turns L2-normalised embedding vectors into the compact types
// vector databases store, as Cohere's `embedding_types` and Voyage's `output_dtype`
// name them: int8 and uint8 (one byte per dimension) and binary and ubinary (one
// sign bit per dimension, eight to a byte).
//
// The scaling is one fixed rule for every model and every `dimensions`, so that
// vectors quantized by different requests, servers or versions compare with each
// other:
//
//	int8    q_i = clamp(round(x_i * Gain * sqrt(d)), -127, 127)   (round half away from zero)
//	uint8   q_i + 128, in 1..255
//	ubinary bit i = 1 when x_i > 0; byte j holds dimensions 8j..8j+7, dimension 8j in
//	        the most significant bit (numpy.packbits(x > 0)); a last partial byte is
//	        padded with zero bits
//	binary  the ubinary byte minus 128, as int8 (offset binary, as Cohere, Voyage and
//	        sentence-transformers' quantize_embeddings do)
//
// where x is the unit vector of d dimensions that the float response would carry.
//
// Why Gain * sqrt(d) suits unit vectors of any size: a unit vector's components
// have a root mean square of exactly 1/sqrt(d), so x_i*sqrt(d) is on the same scale
// whatever d is, and one gain fits 32 and 4096 dimensions alike. Two bounds hold for
// every unit vector, with no assumption on the model:
//   - rounding: each unclipped component moves by at most 1/(2*Gain*sqrt(d)), so the
//     rounding error of the whole vector (rescaled by 1/(Gain*sqrt(d))) has a norm
//     of at most 1/(2*Gain) = 0.0156;
//   - clipping: only components with |x_i| > 127/(Gain*sqrt(d)) = ClipSigma/sqrt(d)
//     are clipped, and since the squares sum to 1 there are at most
//     d/ClipSigma^2 (d/15.75) of them.
//
// The gain itself (Gain = 32, clipping at 3.97 root-mean-squares) is calibrated on
// measured components: docs/quantization.md states the corpus, the model, the
// method and the figures.
//
// Dot products of int8 vectors are Gain^2*d times those of the float vectors up to
// the errors above, so ranking by int8 dot product (or by cosine) ranks as the
// floats do; binary vectors are compared by Hamming distance.
package quantize

import (
	"fmt"
	"math"
)

// Type is an output type of the embeddings endpoint.
type Type int

const (
	// Float is the default: float32 components.
	Float Type = iota
	// Int8 is scalar quantization to signed bytes.
	Int8
	// Uint8 is Int8 shifted by 128.
	Uint8
	// Binary is the packed sign bits as offset int8 (ubinary - 128).
	Binary
	// Ubinary is the packed sign bits as unsigned bytes.
	Ubinary
)

// Names are the wire names, in Type order.
var names = [...]string{"float", "int8", "uint8", "binary", "ubinary"}

func (t Type) String() string {
	if int(t) < len(names) {
		return names[t]
	}
	return fmt.Sprintf("Type(%d)", int(t))
}

// Parse maps a wire name ("float", "int8", "uint8", "binary", "ubinary") to its Type.
func Parse(s string) (Type, bool) {
	for i, n := range names {
		if s == n {
			return Type(i), true
		}
	}
	return Float, false
}

// Signed says whether the bytes of t are two's-complement int8 (Int8, Binary) rather
// than uint8.
func (t Type) Signed() bool { return t == Int8 || t == Binary }

// Len is the number of bytes (and of integers on the wire) for d dimensions.
func (t Type) Len(d int) int {
	switch t {
	case Binary, Ubinary:
		return (d + 7) / 8
	case Float:
		return 4 * d
	}
	return d
}

const (
	// Gain scales x_i*sqrt(d) to int8 steps: the step is 1/Gain of a unit vector's
	// root-mean-square component.
	Gain = 32
	// ClipSigma is where int8 clips, in root-mean-square components: 127/Gain.
	ClipSigma = 127.0 / Gain
)

// Quantize returns v (a unit vector) as the bytes of type t, which must not be
// Float. Signed types hold two's-complement bytes.
func Quantize(t Type, v []float32) []byte {
	switch t {
	case Int8, Uint8:
		return scalar(v, t == Uint8)
	case Binary, Ubinary:
		return signBits(v, t == Binary)
	}
	panic("quantize: Quantize(" + t.String() + ")")
}

func scalar(v []float32, unsigned bool) []byte {
	out := make([]byte, len(v))
	scale := Gain * math.Sqrt(float64(len(v)))
	for i, x := range v {
		q := math.Round(float64(x) * scale)
		q = max(-127, min(127, q))
		if math.IsNaN(q) {
			q = 0
		}
		if unsigned {
			out[i] = byte(int(q) + 128)
		} else {
			out[i] = byte(int8(q))
		}
	}
	return out
}

func signBits(v []float32, offset bool) []byte {
	out := make([]byte, (len(v)+7)/8)
	for i, x := range v {
		if x > 0 {
			out[i/8] |= 0x80 >> (i % 8)
		}
	}
	if offset {
		// u - 128 as int8 has the bits of u with the top bit flipped.
		for i := range out {
			out[i] ^= 0x80
		}
	}
	return out
}

// Dequantize maps int8/uint8 bytes back to approximate unit-vector components
// (q / (Gain*sqrt(d))), for tests and clients that want floats again.
func Dequantize(t Type, b []byte) []float64 {
	out := make([]float64, len(b))
	scale := Gain * math.Sqrt(float64(len(b)))
	for i, x := range b {
		q := float64(int8(x))
		if t == Uint8 {
			q = float64(x) - 128
		}
		out[i] = q / scale
	}
	return out
}
