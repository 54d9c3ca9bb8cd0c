package codec

import (
	"fmt"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// MaxDim bounds each of the loop dimensions n, m and p accepted from the wire.
const MaxDim = 1000

// ParamsWire is mpc.Params on the wire; the modulus travels as its preset
// name or decimal value (mpc.Field.Name).
type ParamsWire struct {
	Modulus string `msgpack:"q"`
	N       int    `msgpack:"n"`
	M       int    `msgpack:"m"`
	P       int    `msgpack:"p"`
	K       int    `msgpack:"k"`
	L       int    `msgpack:"l"`
	Lambda  int    `msgpack:"lambda"`
	Variant uint8  `msgpack:"variant"`
}

// PutParams encodes p. p.Field must be set.
func PutParams(p mpc.Params) ParamsWire {
	return ParamsWire{
		Modulus: p.Field.Name(),
		N:       p.N, M: p.M, P: p.P,
		K: p.K, L: p.L, Lambda: p.Lambda,
		Variant: uint8(p.Variant),
	}
}

// Params parses the modulus and returns validated parameters
// (mpc.Params.Validate) with every dimension at most MaxDim. A bad modulus,
// variant or parameter set fails with ErrMalformed (also wrapping the mpc
// error); a dimension over MaxDim with ErrDimension.
func (w ParamsWire) Params() (mpc.Params, error) {
	if w.N > MaxDim || w.M > MaxDim || w.P > MaxDim {
		return mpc.Params{}, fmt.Errorf("%w: loop dimensions n=%d m=%d p=%d, at most %d each", ErrDimension, w.N, w.M, w.P, MaxDim)
	}
	if w.Variant != uint8(mpc.PerTick) && w.Variant != uint8(mpc.FixedMask) {
		return mpc.Params{}, fmt.Errorf("%w: mask variant %d, want %d (per-tick) or %d (fixed)", ErrMalformed, w.Variant, mpc.PerTick, mpc.FixedMask)
	}
	if len(w.Modulus) > 100 { // 2^255 has 77 decimal digits
		return mpc.Params{}, fmt.Errorf("%w: modulus of %d characters", ErrMalformed, len(w.Modulus))
	}
	f, err := mpc.ParseModulus(w.Modulus)
	if err != nil {
		return mpc.Params{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	p := mpc.Params{Field: f, N: w.N, M: w.M, P: w.P, K: w.K, L: w.L, Lambda: w.Lambda, Variant: mpc.Variant(w.Variant)}
	if err := p.Validate(); err != nil {
		return mpc.Params{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return p, nil
}
