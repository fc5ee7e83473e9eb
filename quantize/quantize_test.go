package quantize

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestScalarExact(t *testing.T) {
	// d = 4: scale = 32*2 = 64.
	v := []float32{0.5, -0.5, 0.0078125, -2.1}
	// 0.5*64 = 32; 0.0078125*64 = 0.5 rounds away from zero to 1; -2.1*64 clips.
	if got, want := Quantize(Int8, v), []byte{32, byte(0xe0), 1, byte(0x81)}; !slices.Equal(got, want) {
		t.Errorf("int8 % x, want % x", got, want)
	}
	if got, want := Quantize(Uint8, v), []byte{160, 96, 129, 1}; !slices.Equal(got, want) {
		t.Errorf("uint8 %v, want %v", got, want)
	}
}

func TestBinaryBitOrder(t *testing.T) {
	// Dimension 0 is the most significant bit of byte 0; 0 is not positive; the
	// tenth dimension starts byte 1, padded with zero bits.
	v := []float32{1, -1, 0, 1, 1, -1, -1, 1, -1, 2}
	if got, want := Quantize(Ubinary, v), []byte{0b10011001, 0b01000000}; !slices.Equal(got, want) {
		t.Errorf("ubinary %08b, want %08b", got, want)
	}
	// binary = ubinary - 128 as int8.
	if got, want := Quantize(Binary, v), []byte{0b00011001, 0b11000000}; !slices.Equal(got, want) { // 25 and -64
		t.Errorf("binary %v, want %v", got, want)
	}
	if Binary.Len(10) != 2 || Int8.Len(10) != 10 {
		t.Errorf("Len: binary %d int8 %d", Binary.Len(10), Int8.Len(10))
	}
}

// The package doc's bound: the rounding error of a unit vector's int8 form has a
// norm of at most 1/(2*Gain) when nothing clips, whatever the dimension; random
// unit vectors (Gaussian directions) clip at 3.97 sigma only rarely.
func TestInt8ErrorBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, d := range []int{32, 64, 256, 1024, 4096} {
		worst := 1.0
		for range 50 {
			v := make([]float32, d)
			var n float64
			for i := range v {
				x := rng.NormFloat64()
				v[i] = float32(x)
				n += x * x
			}
			for i := range v {
				v[i] = float32(float64(v[i]) / math.Sqrt(n))
			}
			for _, typ := range []Type{Int8, Uint8} {
				back := Dequantize(typ, Quantize(typ, v))
				var e, dot, nb float64
				for i := range v {
					e += (back[i] - float64(v[i])) * (back[i] - float64(v[i]))
					dot += back[i] * float64(v[i])
					nb += back[i] * back[i]
				}
				clipped := false
				for _, x := range v {
					clipped = clipped || math.Abs(float64(x))*math.Sqrt(float64(d)) > ClipSigma
				}
				if !clipped && math.Sqrt(e) > 1/(2.0*Gain) {
					t.Errorf("d=%d %v: error norm %.5f over the bound %.5f", d, typ, math.Sqrt(e), 1/(2.0*Gain))
				}
				worst = min(worst, dot/math.Sqrt(nb))
			}
		}
		if worst < 0.999 {
			t.Errorf("d=%d: worst cosine to the float vector %.6f, want >= 0.999", d, worst)
		}
	}
}

func TestParse(t *testing.T) {
	for i, n := range names {
		if typ, ok := Parse(n); !ok || typ != Type(i) || typ.String() != n {
			t.Errorf("Parse(%q) = %v %v", n, typ, ok)
		}
	}
	if _, ok := Parse("int4"); ok {
		t.Error("Parse(int4) ok")
	}
}
