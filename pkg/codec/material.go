package codec

import (
	"fmt"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// MaterialPayload (KindMaterial, dealer -> party i) is one party's share of
// one item (mpc.TickMaterial): the triple U, V, W and the truncation mask
// M, L. U is empty (0 x 0) in the fixed-mask variant.
type MaterialPayload struct {
	Nonce [16]byte   `msgpack:"nonce"`
	U     MatrixWire `msgpack:"u"`
	V     MatrixWire `msgpack:"v"`
	W     MatrixWire `msgpack:"w"`
	M     MatrixWire `msgpack:"m"`
	L     MatrixWire `msgpack:"l"`
}

// PutMaterial encodes one party's material of the item with this nonce.
func PutMaterial(f *mpc.Field, nonce [16]byte, m mpc.TickMaterial) MaterialPayload {
	return MaterialPayload{
		Nonce: nonce,
		U:     PutMatrix(f, m.Triple.U),
		V:     PutMatrix(f, m.Triple.V),
		W:     PutMatrix(f, m.Triple.W),
		M:     PutMatrix(f, m.Mask.M),
		L:     PutMatrix(f, m.Mask.L),
	}
}

// AppendMaterial is PutMaterial with every matrix's entries appended to buf,
// which it returns extended: the payload's matrices alias buf until the
// caller reuses it. For a caller that encodes material after material.
func AppendMaterial(f *mpc.Field, buf []byte, nonce [16]byte, m mpc.TickMaterial) (MaterialPayload, []byte) {
	p := MaterialPayload{Nonce: nonce}
	p.U, buf = AppendMatrix(f, buf, m.Triple.U)
	p.V, buf = AppendMatrix(f, buf, m.Triple.V)
	p.W, buf = AppendMatrix(f, buf, m.Triple.W)
	p.M, buf = AppendMatrix(f, buf, m.Mask.M)
	p.L, buf = AppendMatrix(f, buf, m.Mask.L)
	return p, buf
}

// Material decodes the material, checking every shape against p: U is
// (n+m) x (n+p) in the per-tick variant and 0 x 0 in the fixed one (the
// result's U is then the zero Matrix), V is (n+p) x 1, W is (n+m) x 1, M and
// L are n x 1.
func (w MaterialPayload) Material(p mpc.Params) (mpc.TickMaterial, error) {
	var m mpc.TickMaterial
	if err := w.MaterialInto(p, &m); err != nil {
		return mpc.TickMaterial{}, err
	}
	return m, nil
}

// MaterialInto is Material into m, recycled first (mpc.TickMaterial.Recycle:
// its matrices are reused where they have the right shape, so a party that
// recycles its materials decodes items without allocating). On error m's
// entries are unspecified.
func (w MaterialPayload) MaterialInto(p mpc.Params, m *mpc.TickMaterial) error {
	if p.Field == nil {
		return fmt.Errorf("%w: parameters without a field", ErrMalformed)
	}
	if p.N < 0 || p.M < 0 || p.P < 0 {
		return fmt.Errorf("%w: parameters with dimensions n=%d m=%d p=%d", ErrDimension, p.N, p.M, p.P)
	}
	m.Recycle(p)
	f := p.Field
	if p.Variant == mpc.PerTick {
		if err := w.U.decodeInto(f, m.Triple.U, "material U"); err != nil {
			return err
		}
	} else if w.U.Rows != 0 || w.U.Cols != 0 || len(w.U.Data) != 0 {
		return fmt.Errorf("%w: material U is %dx%d, want 0x0 in the fixed-mask variant", ErrDimension, w.U.Rows, w.U.Cols)
	}
	for _, d := range []struct {
		name string
		w    MatrixWire
		dst  mpc.Matrix
	}{
		{"V", w.V, m.Triple.V},
		{"W", w.W, m.Triple.W},
		{"M", w.M, m.Mask.M},
		{"L", w.L, m.Mask.L},
	} {
		if err := d.w.decodeInto(f, d.dst, "material "+d.name); err != nil {
			return err
		}
	}
	return nil
}

// ItemMsg is one dealer item. P0 and P1 are sealed
// envelopes (KindMaterial, dealer -> party i) of each party's
// MaterialPayload; with seed compression P0 is instead the nonce's tag
// (mpc.ItemTag, mpc.ItemTagLen bytes; empty from dealers of releases before
// it), which party0 checks before it expands its share with mpc.ExpandP0
// from Nonce. ItemMsg itself is not sealed: it holds nothing but the
// envelopes, the tag and public routing data.
type ItemMsg struct {
	Loop  string   `msgpack:"loop"`
	Epoch uint64   `msgpack:"epoch"`
	Nonce [16]byte `msgpack:"nonce"`
	P0    []byte   `msgpack:"p0"`
	P1    []byte   `msgpack:"p1"`
}

// PeekItem decodes a stream message's item as Unmarshal does (the same
// checks, the same errors) but without copying: P0 and P1 alias data. For a
// consumer that keeps only its own envelope (copying it, if it wants data
// freed).
func PeekItem(data []byte) (ItemMsg, error) {
	var m ItemMsg
	if len(data) > MaxEnvelope {
		return m, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	if err := m.parse(data); err != nil { // validated too
		return ItemMsg{}, fmt.Errorf("%w (decoding %T)", err, &m)
	}
	return m, nil
}

// MaxItemsPerMsg bounds the items one stream message may hold (the
// set-up's ItemsPerMsg): a party numbers an item by its stream sequence and
// its index in the message, in 8 bits.
const MaxItemsPerMsg = 128

// PeekItems decodes a stream message of one or more items, each encoded as
// ItemMsg and simply concatenated (one item is exactly the single-item
// message of earlier releases), with PeekItem's checks on each, and at most
// limit items (1..MaxItemsPerMsg). P0 and P1 alias data.
func PeekItems(data []byte, limit int) ([]ItemMsg, error) {
	return PeekItemsAppend(nil, data, limit, "")
}

// PeekItemsAppend is PeekItems appending the items to dst, for a consumer
// that decodes message after message into the same slice: on error it
// returns dst unchanged. Every item's Loop is loop itself, not a copy, if the
// message names that loop (and the first item's Loop otherwise), so that the
// consumer of one loop's items decodes them without allocating.
func PeekItemsAppend(dst []ItemMsg, data []byte, limit int, loop string) ([]ItemMsg, error) {
	if len(data) > MaxEnvelope {
		return dst, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(data), MaxEnvelope)
	}
	limit = min(MaxItemsPerMsg, max(1, limit))
	base := len(dst)
	items := dst
	for off := 0; off < len(data) || len(items) == base; {
		n := len(items) - base
		if n == limit {
			clear(items[base:])
			return dst, fmt.Errorf("%w: more than %d items in one stream message", ErrMalformed, limit)
		}
		if n > 0 {
			loop = items[base].Loop
		}
		var m ItemMsg
		k, err := m.parsePrefix(data[off:], loop)
		if err != nil {
			err = fmt.Errorf("%w (decoding item %d of the message)", err, n)
		} else {
			err = m.validate()
		}
		if err == nil && n > 0 && (m.Loop != items[base].Loop || m.Epoch != items[base].Epoch) {
			err = fmt.Errorf("%w: item %d is for loop %q epoch %d, the message's first for %q epoch %d", ErrHeader, n, m.Loop, m.Epoch, items[base].Loop, items[base].Epoch)
		}
		if err != nil {
			clear(items[base:]) // no references into data are kept
			return dst, err
		}
		items = append(items, m)
		off += k
	}
	return items, nil
}

func (m *ItemMsg) validate() error {
	if err := ValidLoopID(m.Loop); err != nil {
		return err
	}
	if len(m.P1) == 0 {
		return fmt.Errorf("%w: item without party1 material", ErrMalformed)
	}
	return nil
}
