package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/x448/float16"
)

// q8Block is the number of values in one Q8_0 block (ggml's QK8_0).
const q8Block = 32

// Decode dequantises data, the raw bytes of whole blocks of typ, into float64 values.
// It supports F32, F16, BF16, F64 and Q8_0; every value of those types except F64 is
// exactly representable as a float32, so the float64 result carries no rounding of its
// own. Q8_0 is dequantised as ggml does it: int8 quant times the block's F16 scale.
func Decode(typ GGMLType, data []byte) ([]float64, error) {
	if !typ.Known() {
		return nil, fmt.Errorf("gguf: cannot decode tensor type %s: not a ggml type", typ)
	}
	bs, ts := typ.BlockSize(), typ.TypeSize()
	if uint64(len(data))%ts != 0 {
		return nil, fmt.Errorf("gguf: %d bytes of %s data is not a whole number of %d-byte blocks", len(data), typ, ts)
	}
	n := uint64(len(data)) / ts * bs
	switch typ {
	case TypeF32:
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
		}
		return out, nil
	case TypeF16:
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(float16.Frombits(binary.LittleEndian.Uint16(data[2*i:])).Float32())
		}
		return out, nil
	case TypeBF16:
		out := make([]float64, n)
		for i := range out {
			out[i] = float64(bf16ToFloat32(binary.LittleEndian.Uint16(data[2*i:])))
		}
		return out, nil
	case TypeF64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
		}
		return out, nil
	case TypeQ8_0:
		out := make([]float64, n)
		for b := uint64(0); b < n/q8Block; b++ {
			block := data[b*ts : (b+1)*ts]
			// ggml computes qs[j]*d in float32; the product of an int8 and an F16
			// (11-bit significand) needs at most 19 bits, so float32 and float64 agree.
			d := float64(float16.Frombits(binary.LittleEndian.Uint16(block)).Float32())
			for j := range q8Block {
				out[b*q8Block+uint64(j)] = float64(int8(block[2+j])) * d
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("gguf: decoding %s tensors is not supported (supported: F32, F16, BF16, F64, Q8_0)", typ)
}

// AppendEncoded appends values, encoded as typ, to dst and returns the extended slice.
// It supports F32, F16, BF16, F64 and Q8_0, rounding as ggml's reference code does
// (round-to-nearest-even for F16 and BF16, quantize_row_q8_0_ref for Q8_0), so a file
// written here holds the bytes llama.cpp's own conversion would write. len(values)
// must be a multiple of the type's block size.
func AppendEncoded(dst []byte, typ GGMLType, values []float32) ([]byte, error) {
	if !typ.Known() {
		return dst, fmt.Errorf("gguf: cannot encode tensor type %s: not a ggml type", typ)
	}
	if bs := typ.BlockSize(); uint64(len(values))%bs != 0 {
		return dst, fmt.Errorf("gguf: %d values cannot be encoded as %s: not a multiple of its block size %d", len(values), typ, bs)
	}
	switch typ {
	case TypeF32:
		for _, v := range values {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case TypeF16:
		for _, v := range values {
			dst = binary.LittleEndian.AppendUint16(dst, float16.Fromfloat32(v).Bits())
		}
	case TypeBF16:
		for _, v := range values {
			dst = binary.LittleEndian.AppendUint16(dst, float32ToBF16(v))
		}
	case TypeF64:
		for _, v := range values {
			dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(float64(v)))
		}
	case TypeQ8_0:
		for b := 0; b < len(values); b += q8Block {
			dst = appendQ8_0Block(dst, values[b:b+q8Block])
		}
	default:
		return dst, fmt.Errorf("gguf: encoding %s tensors is not supported (supported: F32, F16, BF16, F64, Q8_0)", typ)
	}
	return dst, nil
}

// appendQ8_0Block is ggml's quantize_row_q8_0_ref for one block, in the same float32
// arithmetic, so the quants match llama.cpp's bit for bit.
func appendQ8_0Block(dst []byte, x []float32) []byte {
	var amax float32
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	var id float32
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, float16.Fromfloat32(d).Bits())
	for _, v := range x {
		// math.Round rounds half away from zero, as C's roundf does.
		dst = append(dst, byte(int8(math.Round(float64(v*id)))))
	}
	return dst
}

func bf16ToFloat32(b uint16) float32 {
	return math.Float32frombits(uint32(b) << 16)
}

// float32ToBF16 is ggml_compute_fp32_to_bf16: round to nearest even, NaNs kept quiet.
func float32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 64
	}
	return uint16((u + (0x7fff + ((u >> 16) & 1))) >> 16)
}
