package party

import (
	"bytes"
	"errors"
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
)

// trimItem keeps only this party's part of a stream message's item, and
// rejects items of another loop or epoch before they are buffered.
func TestTrimItem(t *testing.T) {
	const loop, epoch = "pend-1", 7
	nonce := [16]byte{1, 2, 3}
	env0, env1 := bytes.Repeat([]byte{0xa0}, 300), bytes.Repeat([]byte{0xa1}, 300)
	msg := func(m codec.ItemMsg) []byte {
		b, err := codec.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	compressed := msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P1: env1})
	full := msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P0: env0, P1: env1})
	p0, p1 := &worker{id: 0, loop: loop, epoch: epoch}, &worker{id: 1, loop: loop, epoch: epoch}

	if r := p0.trimItem(compressed); r.err != nil || r.env != nil || r.nonce != nonce {
		t.Errorf("P0, compressed: %+v; want the nonce alone", r)
	}
	if r := p1.trimItem(compressed); r.err != nil || !bytes.Equal(r.env, env1) || r.nonce != nonce {
		t.Errorf("P1, compressed: err %v, %d-byte envelope; want its own", r.err, len(r.env))
	}
	for _, c := range []struct {
		w    *worker
		want []byte
	}{{p0, env0}, {p1, env1}} {
		data := bytes.Clone(full)
		r := c.w.trimItem(data)
		if r.err != nil || !bytes.Equal(r.env, c.want) {
			t.Fatalf("P%d, uncompressed: err %v; want its own envelope", c.w.id, r.err)
		}
		// A copy: the message's buffer (with the other party's share) is not kept.
		clear(data)
		if !bytes.Equal(r.env, c.want) {
			t.Errorf("P%d: the kept envelope aliases the message", c.w.id)
		}
	}

	for name, data := range map[string][]byte{
		"other loop":  msg(codec.ItemMsg{Loop: "pend-2", Epoch: epoch, Nonce: nonce, P1: env1}),
		"other epoch": msg(codec.ItemMsg{Loop: loop, Epoch: epoch + 1, Nonce: nonce, P1: env1}),
	} {
		if r := p0.trimItem(data); !errors.Is(r.err, codec.ErrHeader) {
			t.Errorf("%s: err %v, want ErrHeader", name, r.err)
		}
	}
	if r := p1.trimItem([]byte{0xc1, 0x00}); r.err == nil {
		t.Error("malformed bytes accepted")
	}
	if r := p1.trimItem(msg(codec.ItemMsg{Loop: loop, Epoch: epoch, Nonce: nonce, P0: env0})); r.err == nil {
		t.Error("item without P1's material accepted")
	}
}
