package gguf

import (
	"fmt"
	"strings"
)

// GGMLType is a tensor element type, numbered as ggml's enum ggml_type.
type GGMLType uint32

// Tensor types. The numbering is ggml's and is part of the file format; gaps are types
// ggml has removed.
const (
	TypeF32     GGMLType = 0
	TypeF16     GGMLType = 1
	TypeQ4_0    GGMLType = 2
	TypeQ4_1    GGMLType = 3
	TypeQ5_0    GGMLType = 6
	TypeQ5_1    GGMLType = 7
	TypeQ8_0    GGMLType = 8
	TypeQ8_1    GGMLType = 9
	TypeQ2_K    GGMLType = 10
	TypeQ3_K    GGMLType = 11
	TypeQ4_K    GGMLType = 12
	TypeQ5_K    GGMLType = 13
	TypeQ6_K    GGMLType = 14
	TypeQ8_K    GGMLType = 15
	TypeIQ2_XXS GGMLType = 16
	TypeIQ2_XS  GGMLType = 17
	TypeIQ3_XXS GGMLType = 18
	TypeIQ1_S   GGMLType = 19
	TypeIQ4_NL  GGMLType = 20
	TypeIQ3_S   GGMLType = 21
	TypeIQ2_S   GGMLType = 22
	TypeIQ4_XS  GGMLType = 23
	TypeI8      GGMLType = 24
	TypeI16     GGMLType = 25
	TypeI32     GGMLType = 26
	TypeI64     GGMLType = 27
	TypeF64     GGMLType = 28
	TypeIQ1_M   GGMLType = 29
	TypeBF16    GGMLType = 30
	TypeTQ1_0   GGMLType = 34
	TypeTQ2_0   GGMLType = 35
	TypeMXFP4   GGMLType = 39
)

// typeTraits is the storage layout of a type: blockSize elements take typeSize bytes.
// Every type is listed, not only those this package can decode, so that the tensor
// index of any model (say a Q4_K one) is sized and bounds-checked correctly.
type typeTraits struct {
	name      string
	blockSize uint64
	typeSize  uint64
}

// traits mirrors ggml.c's type_traits table; the sizes are the sizeof(block_*) values
// that ggml-common.h static_asserts.
var traits = map[GGMLType]typeTraits{
	TypeF32:     {"F32", 1, 4},
	TypeF16:     {"F16", 1, 2},
	TypeQ4_0:    {"Q4_0", 32, 18},
	TypeQ4_1:    {"Q4_1", 32, 20},
	TypeQ5_0:    {"Q5_0", 32, 22},
	TypeQ5_1:    {"Q5_1", 32, 24},
	TypeQ8_0:    {"Q8_0", 32, 34},
	TypeQ8_1:    {"Q8_1", 32, 36},
	TypeQ2_K:    {"Q2_K", 256, 84},
	TypeQ3_K:    {"Q3_K", 256, 110},
	TypeQ4_K:    {"Q4_K", 256, 144},
	TypeQ5_K:    {"Q5_K", 256, 176},
	TypeQ6_K:    {"Q6_K", 256, 210},
	TypeQ8_K:    {"Q8_K", 256, 292},
	TypeIQ2_XXS: {"IQ2_XXS", 256, 66},
	TypeIQ2_XS:  {"IQ2_XS", 256, 74},
	TypeIQ3_XXS: {"IQ3_XXS", 256, 98},
	TypeIQ1_S:   {"IQ1_S", 256, 50},
	TypeIQ4_NL:  {"IQ4_NL", 32, 18},
	TypeIQ3_S:   {"IQ3_S", 256, 110},
	TypeIQ2_S:   {"IQ2_S", 256, 82},
	TypeIQ4_XS:  {"IQ4_XS", 256, 136},
	TypeI8:      {"I8", 1, 1},
	TypeI16:     {"I16", 1, 2},
	TypeI32:     {"I32", 1, 4},
	TypeI64:     {"I64", 1, 8},
	TypeF64:     {"F64", 1, 8},
	TypeIQ1_M:   {"IQ1_M", 256, 56},
	TypeBF16:    {"BF16", 1, 2},
	TypeTQ1_0:   {"TQ1_0", 256, 54},
	TypeTQ2_0:   {"TQ2_0", 256, 66},
	TypeMXFP4:   {"MXFP4", 32, 17},
}

// String returns the type's name as gguf-py spells it ("F16", "Q8_0"), or
// "GGMLType(n)" for a number ggml does not define.
func (t GGMLType) String() string {
	if tr, ok := traits[t]; ok {
		return tr.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// Known reports whether ggml defines the type, i.e. whether its storage size is known.
func (t GGMLType) Known() bool {
	_, ok := traits[t]
	return ok
}

// BlockSize is the number of elements stored together in one block (1 for plain
// float and integer types, 32 for Q8_0). A tensor's row length must be a multiple of it.
// It is 0 for an unknown type.
func (t GGMLType) BlockSize() uint64 { return traits[t].blockSize }

// TypeSize is the number of bytes one block takes. It is 0 for an unknown type.
func (t GGMLType) TypeSize() uint64 { return traits[t].typeSize }

// ParseType resolves a type name such as "f16", "Q8_0" or "bf16" (case-insensitive).
func ParseType(name string) (GGMLType, error) {
	for t, tr := range traits {
		if strings.EqualFold(tr.name, name) {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: unknown tensor type %q (want a ggml type name such as f32, f16, bf16 or q8_0)", name)
}

// valueType is a metadata value type, numbered as ggml's enum gguf_type.
type valueType uint32

const (
	valUint8   valueType = 0
	valInt8    valueType = 1
	valUint16  valueType = 2
	valInt16   valueType = 3
	valUint32  valueType = 4
	valInt32   valueType = 5
	valFloat32 valueType = 6
	valBool    valueType = 7
	valString  valueType = 8
	valArray   valueType = 9
	valUint64  valueType = 10
	valInt64   valueType = 11
	valFloat64 valueType = 12
)

// size is the encoded size of one scalar of the type; for strings it is the minimum
// (the 8-byte length of an empty string). It is 0 for arrays and unknown types.
func (v valueType) size() uint64 {
	switch v {
	case valUint8, valInt8, valBool:
		return 1
	case valUint16, valInt16:
		return 2
	case valUint32, valInt32, valFloat32:
		return 4
	case valUint64, valInt64, valFloat64, valString:
		return 8
	}
	return 0
}

func (v valueType) String() string {
	switch v {
	case valUint8:
		return "uint8"
	case valInt8:
		return "int8"
	case valUint16:
		return "uint16"
	case valInt16:
		return "int16"
	case valUint32:
		return "uint32"
	case valInt32:
		return "int32"
	case valFloat32:
		return "float32"
	case valBool:
		return "bool"
	case valString:
		return "string"
	case valArray:
		return "array"
	case valUint64:
		return "uint64"
	case valInt64:
		return "int64"
	case valFloat64:
		return "float64"
	}
	return fmt.Sprintf("gguf_type(%d)", uint32(v))
}

// describe names the Go type of a metadata value for error messages, in GGUF's terms
// ("uint32", "string array").
func describe(v any) string {
	if vt, ok := scalarType(v); ok {
		return vt.String()
	}
	if vt, ok := arrayType(v); ok {
		return vt.String() + " array"
	}
	return fmt.Sprintf("%T", v)
}

// scalarType maps a Go scalar to its GGUF value type.
func scalarType(v any) (valueType, bool) {
	switch v.(type) {
	case uint8:
		return valUint8, true
	case int8:
		return valInt8, true
	case uint16:
		return valUint16, true
	case int16:
		return valInt16, true
	case uint32:
		return valUint32, true
	case int32:
		return valInt32, true
	case float32:
		return valFloat32, true
	case bool:
		return valBool, true
	case string:
		return valString, true
	case uint64:
		return valUint64, true
	case int64:
		return valInt64, true
	case float64:
		return valFloat64, true
	}
	return 0, false
}

// arrayType maps a Go slice to the GGUF value type of its elements.
func arrayType(v any) (valueType, bool) {
	switch v.(type) {
	case []uint8:
		return valUint8, true
	case []int8:
		return valInt8, true
	case []uint16:
		return valUint16, true
	case []int16:
		return valInt16, true
	case []uint32:
		return valUint32, true
	case []int32:
		return valInt32, true
	case []float32:
		return valFloat32, true
	case []bool:
		return valBool, true
	case []string:
		return valString, true
	case []uint64:
		return valUint64, true
	case []int64:
		return valInt64, true
	case []float64:
		return valFloat64, true
	}
	return 0, false
}
