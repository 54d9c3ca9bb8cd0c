package mpc

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"
)

// ItemSerial names an offline item: the Dealer that drew it and its place
// among that Dealer's items. It is the item's nonce (Nonce), which the
// dealer seals into each party's share of the item, so a party can tell an
// item it has already used from a fresh one whatever stream sequence the
// broker delivers it at (see SerialOf).
//
// The nonce is the item's AES-CTR start block for P0's seed-compressed
// shares (ExpandP0): Instance is its high 64 bits, Counter the next 32 and
// the low 32 are zero. The counter block only counts up in the low 32 bits
// within an item (an item is far shorter than 2^32 blocks), so distinct
// serials never share a keystream block.
type ItemSerial struct {
	// Instance identifies the Dealer: the time it drew its first item, in
	// Unix nanoseconds, with the low 16 bits random. A Dealer that starts in
	// a later 65.5-µs window of a clock in step has a larger instance, which
	// a party uses to forget the oldest (internal/party); two that start in
	// the same window are ordered by the random bits, and once in 65,536
	// share an instance: each serial of it is then taken once, whichever
	// Dealer's comes first, and the other's item is refused, never reused.
	Instance uint64
	// Counter is 1 for the Dealer's first item and counts up by one.
	Counter uint32
}

// Nonce is the serial as an item's nonce.
func (s ItemSerial) Nonce() [16]byte {
	var n [16]byte
	binary.BigEndian.PutUint64(n[:8], s.Instance)
	binary.BigEndian.PutUint32(n[8:12], s.Counter)
	return n
}

// SerialOf reads an item's nonce as its serial. It reports false for a
// nonce that is not one (the low 32 bits not zero, or a zero counter or
// instance): an item of a dealer from before serials (random nonces), or a
// forged one.
func SerialOf(nonce [16]byte) (ItemSerial, bool) {
	s := ItemSerial{Instance: binary.BigEndian.Uint64(nonce[:8]), Counter: binary.BigEndian.Uint32(nonce[8:12])}
	return s, binary.BigEndian.Uint32(nonce[12:]) == 0 && s.Counter != 0 && s.Instance != 0
}

func (s ItemSerial) String() string { return fmt.Sprintf("%016x/%d", s.Instance, s.Counter) }

// serials draws one Dealer's item serials, in order.
type serials struct {
	mu   sync.Mutex
	last ItemSerial
}

// Resume makes the Dealer's next item the one after last: last's instance,
// its counter plus one. A Dealer fed the same randomness as another then
// draws the same items (tests).
func (d *Dealer) Resume(last ItemSerial) {
	d.serial.mu.Lock()
	d.serial.last = last
	d.serial.mu.Unlock()
}

// next returns the next serial: the counter of the current instance plus
// one, or the first of a new instance (at the first item, and when the
// counter is used up).
func (g *serials) next() (ItemSerial, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last.Instance == 0 || g.last.Counter == math.MaxUint32 {
		var b [2]byte
		if _, err := rand.Read(b[:]); err != nil {
			return ItemSerial{}, fmt.Errorf("mpc: reading randomness: %w", err)
		}
		inst := uint64(time.Now().UnixNano())&^0xffff | uint64(binary.BigEndian.Uint16(b[:]))
		if inst <= g.last.Instance { // a clock stepped back: stay increasing
			inst = g.last.Instance + 1
		}
		g.last = ItemSerial{Instance: inst}
	}
	g.last.Counter++
	return g.last, nil
}
