package mpc

import (
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"io"
	"sync"
)

// Dealer material (protocol.md §6, offline phase): one Item per tick holds a
// matrix triple (d1 = n+m, d2 = n+p, d3 = 1) and a truncation mask (n x 1).
//
// Seed compression: P0's shares are uniform in Z_q whatever the secret, so the
// dealer derives them from an AES-CTR stream under a per-session seed that P0
// also holds, keyed by the item's nonce. Such an item carries only P1's
// shares (the corrections), the nonce and the nonce's tag; P0 checks the
// tag (Expander.CheckTag) and regenerates its part with ExpandP0. P1 never
// learns the seed.
//
// The tag is what makes the nonce P0's to trust: in the stream it travels
// in the clear, so without it the broker could hand P0 any nonce, and P0,
// which records every nonce it expands as used (its T = ξ − V reveals
// something of that V), would be made to refuse the dealer's genuine items
// of that serial and below for good.

// Session holds the per-session secret shared by the client (sensor) and the
// dealer replicas. Everything else is derived from it with domain separation.
type Session struct {
	secret [32]byte
}

// NewSession wraps a 32-byte secret (from crypto/rand in production).
func NewSession(secret [32]byte) *Session { return &Session{secret: secret} }

func (s *Session) derive(label string) [32]byte {
	h := sha256.New()
	h.Write([]byte("duet/v1/"))
	h.Write([]byte(label))
	h.Write(s.secret[:])
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// P0Seed is the seed from which P0's shares of compressed items and of the
// fixed mask U are derived. It is given to P0 only.
func (s *Session) P0Seed() [32]byte { return s.derive("p0-seed") }

var (
	nonceFixedU  = [16]byte{'f', 'i', 'x', 'e', 'd', '-', 'U'}
	nonceFixedU0 = [16]byte{'f', 'i', 'x', 'e', 'd', '-', 'U', '0'}
)

// FixedU returns the session's fixed mask U for the fixed-mask variant. Only
// the client side (sensor, dealers) may call it; parties get their shares.
func (s *Session) FixedU(prm Params) (Matrix, error) {
	r, c := prm.PhiShape()
	return prm.Field.RandomMatrix(NewPRG(s.derive("fixed-U"), nonceFixedU), r, c)
}

// FixedUShare0 derives P0's share of U from P0's seed, so P0 needs nothing but
// the seed; P1's share is FixedU - FixedUShare0.
func FixedUShare0(prm Params, p0Seed [32]byte) (Matrix, error) {
	r, c := prm.PhiShape()
	return prm.Field.RandomMatrix(NewPRG(p0Seed, nonceFixedU0), r, c)
}

// FixedUShares returns both shares of the session's fixed U.
func (s *Session) FixedUShares(prm Params) (u0, u1 Matrix, err error) {
	u, err := s.FixedU(prm)
	if err != nil {
		return
	}
	if u0, err = FixedUShare0(prm, s.P0Seed()); err != nil {
		return
	}
	u1 = NewMatrix(u.Rows, u.Cols)
	prm.Field.MatSub(u1, u, u0)
	return u0, u1, nil
}

// Item is one tick's dealer material for both parties. With seed compression
// P0 is nil, P0's material is ExpandP0(prm, seed, Nonce) and Tag is
// ItemTag(seed, Nonce). Nonce is the item's serial (ItemSerial.Nonce):
// unique to the item, in the order its Dealer drew it.
type Item struct {
	Nonce [16]byte
	Tag   [ItemTagLen]byte // compressed items only
	P0    *TickMaterial
	P1    TickMaterial
}

// ItemTagLen is the length of a compressed item's tag.
const ItemTagLen = 16

// tagCipher is the key schedule of the tags of P0's seed: AES-256 under a
// key derived from the seed apart from the keystream's key (the seed
// itself). A tag is the nonce enciphered: the nonce is one block, so this
// is a PRF on it, and a tag for a nonce the dealer did not draw cannot be
// made without the seed.
func tagCipher(p0Seed [32]byte) cipher.Block {
	h := sha256.New()
	h.Write([]byte("duet/v1/p0-item-tag"))
	h.Write(p0Seed[:])
	var k [32]byte
	h.Sum(k[:0])
	return seedCipher(k)
}

// ItemTag is the tag of the compressed item with this nonce under P0's
// seed: what the Dealer puts in Item.Tag.
func ItemTag(p0Seed [32]byte, nonce [16]byte) [ItemTagLen]byte {
	var t [ItemTagLen]byte
	tagCipher(p0Seed).Encrypt(t[:], nonce[:])
	return t
}

// Dealer generates Items for one loop. Several dealers built from the same
// Session produce interchangeable items. A Dealer is safe for concurrent use
// if its reader is.
type Dealer struct {
	prm      Params
	compress bool
	p0Seed   [32]byte
	fixedU   Matrix
	// p0Blk is p0Seed's AES key schedule, made once (compress): a
	// cipher.Block is safe for concurrent use, and each item's keystream
	// is a pooled prg reset in place on it (ctr.reset), where NewPRG made a
	// key schedule, a copy of it for the library's stream and a 1 KB
	// buffer per item.
	p0Blk cipher.Block
	// tagBlk makes the compressed items' tags (tagCipher).
	tagBlk cipher.Block
	// serial numbers the items this Dealer draws (Item.Nonce).
	serial serials
}

// prgPool holds the streams that compressed items are drawn from: a
// stream is reset per item, so what is left in it is never read again.
var prgPool = sync.Pool{New: func() any { return new(prg) }}

// NewDealer returns a dealer for the loop's parameters.
func NewDealer(prm Params, s *Session, compress bool) (*Dealer, error) {
	if err := prm.Validate(); err != nil {
		return nil, err
	}
	d := &Dealer{prm: prm, compress: compress, p0Seed: s.P0Seed()}
	if compress {
		d.p0Blk = seedCipher(d.p0Seed)
		d.tagBlk = tagCipher(d.p0Seed)
	}
	if prm.Variant == FixedMask {
		u, err := s.FixedU(prm)
		if err != nil {
			return nil, err
		}
		d.fixedU = u
	}
	return d, nil
}

// Next draws one Item; r supplies the fresh randomness of the triple and the
// mask. Its nonce is the Dealer's next serial: the items of one Dealer, used
// from one goroutine, come out in counter order.
func (d *Dealer) Next(r io.Reader) (Item, error) {
	var it Item
	s, err := d.serial.next()
	if err != nil {
		return it, err
	}
	it.Nonce = s.Nonce()
	r0 := r
	if d.compress {
		// The keystream NewPRG(d.p0Seed, it.Nonce) would give, to the
		// byte (ctr), which ExpandP0 replays.
		p := prgPool.Get().(*prg)
		defer prgPool.Put(p)
		p.ctr.reset(d.p0Blk, it.Nonce)
		r0 = p
		// The tag, through the pooled stream's blocks: it.Tag passed to
		// the cipher (an interface) would move it to the heap.
		p.tagIn = it.Nonce
		d.tagBlk.Encrypt(p.tagOut[:], p.tagIn[:])
		it.Tag = p.tagOut
	}
	m0, m1, err := genMaterial(d.prm, r, r0, d.fixedU)
	if err != nil {
		return it, err
	}
	it.P1 = m1
	if !d.compress {
		it.P0 = &m0
	}
	return it, nil
}

// genMaterial draws the triple and the mask; P0's shares come from r0 in the
// fixed order U0 (per-tick only), V0, W0, M0, L0 that expandP0 replays.
func genMaterial(prm Params, r, r0 io.Reader, fixedU Matrix) (m0, m1 TickMaterial, err error) {
	f := prm.Field
	rows, cols := prm.PhiShape()
	if prm.Variant == FixedMask {
		m0.Triple, m1.Triple, err = f.GenFixedTriple(r, r0, fixedU, 1)
	} else {
		m0.Triple, m1.Triple, err = f.GenTriple(r, r0, rows, cols, 1)
	}
	if err != nil {
		return
	}
	m0.Mask, m1.Mask, err = f.GenMask(r, r0, prm.N, 1, prm.Kappa(), prm.L, prm.Lambda)
	return
}

// ExpandP0 regenerates P0's material of a compressed item from the seed.
func ExpandP0(prm Params, p0Seed [32]byte, nonce [16]byte) (TickMaterial, error) {
	return NewExpander(prm, p0Seed).Expand(nonce)
}

// Expander is ExpandP0 for one set-up: it keeps the seed's AES key schedule,
// the keystream's state and its buffer from one item to the next, so that
// expanding a small item (every matrix under ctrBulk bytes, the pendulum's)
// into recycled material allocates nothing. Not safe for concurrent use.
type Expander struct {
	prm Params
	blk cipher.Block
	tag cipher.Block
	r0  prg
	// in and want are CheckTag's blocks, kept so that passing them to
	// the cipher (an interface) allocates nothing.
	in, want [ItemTagLen]byte
}

// NewExpander returns an expander of P0's material under p0Seed.
func NewExpander(prm Params, p0Seed [32]byte) *Expander {
	return &Expander{prm: prm, blk: seedCipher(p0Seed), tag: tagCipher(p0Seed)}
}

// CheckTag reports whether tag is the Dealer's tag of the item with this
// nonce (Item.Tag), in constant time. P0 checks it before it expands the
// item or records its nonce as used.
func (e *Expander) CheckTag(nonce [16]byte, tag [ItemTagLen]byte) bool {
	e.in = nonce
	e.tag.Encrypt(e.want[:], e.in[:])
	return subtle.ConstantTimeCompare(e.want[:], tag[:]) == 1
}

// Expand regenerates P0's material of the item with this nonce: the same
// as ExpandP0.
func (e *Expander) Expand(nonce [16]byte) (TickMaterial, error) {
	var m TickMaterial
	err := e.ExpandInto(nonce, &m)
	return m, err
}

// ExpandInto is Expand into m (TickMaterial.Recycle: m's matrices are
// reused where they have the right shape). On error m's entries are
// unspecified.
func (e *Expander) ExpandInto(nonce [16]byte, m *TickMaterial) error {
	e.r0.ctr.reset(e.blk, nonce)
	return expandP0(e.prm, &e.r0, m)
}

// expandP0 draws P0's shares from r0 in genMaterial's order: U (per-tick
// only; in the fixed-mask variant it is empty and draws nothing), V, W, M, L.
func expandP0(prm Params, r0 io.Reader, m *TickMaterial) error {
	m.Recycle(prm)
	f := prm.Field
	for _, x := range []Matrix{m.Triple.U, m.Triple.V, m.Triple.W, m.Mask.M, m.Mask.L} {
		if err := f.FillRandom(r0, x.Data); err != nil {
			return err
		}
	}
	return nil
}

// MaterialElems is the number of field elements in one party's material.
func MaterialElems(prm Params) int {
	rows, cols := prm.PhiShape()
	n := cols + rows + 2*prm.N // V, W, M, L
	if prm.Variant == PerTick {
		n += rows * cols // U
	}
	return n
}

// DealerBytesPerTick is the payload a dealer ships per tick (both parties,
// before encryption and framing): with compression only P1's shares, the
// 16-byte nonce and its 16-byte tag travel.
func DealerBytesPerTick(prm Params, compress bool) int {
	b := MaterialElems(prm) * prm.Field.ByteLen()
	if compress {
		return b + 16 + ItemTagLen
	}
	return 2*b + 16
}
