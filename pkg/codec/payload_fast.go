package codec

// Fast-path encoders and parsers of the per-tick payloads (msgpack_fast.go).
// Each writes and reads the fields in declaration order under their msgpack
// tags, exactly as the library does; keep them in step with the structs.

func (w MatrixWire) encodedLen() int {
	return 1 + keyLen("r") + uintLen(uint64(w.Rows)) + keyLen("c") + uintLen(uint64(w.Cols)) + keyLen("d") + binLen(w.Data)
}

func (w MatrixWire) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|3)
	b = appendUint(appendKey(b, "r"), uint64(w.Rows))
	b = appendUint(appendKey(b, "c"), uint64(w.Cols))
	return appendBin(appendKey(b, "d"), w.Data)
}

// matrix reads a MatrixWire field; Data aliases the input.
func (d *decoder) matrix(name string) (w MatrixWire) {
	if !d.key(name) {
		return w
	}
	d.mapHeader(name, 3)
	w.Rows = d.uint32("r")
	w.Cols = d.uint32("c")
	w.Data = d.bytes("d")
	return w
}

func (w *MatrixWire) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v MatrixWire
	d.mapHeader("MatrixWire", 3)
	v.Rows = d.uint32("r")
	v.Cols = d.uint32("c")
	v.Data = d.bytes("d")
	if err := d.end(); err != nil {
		return err
	}
	own(&v.Data)
	*w = v
	return nil
}

func (p MeasurePayload) encodedLen() int {
	return 1 + keyLen("y") + p.Y.encodedLen() + keyLen("sent") + intLen(p.SentUnixNano)
}

func (p MeasurePayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|2)
	b = p.Y.appendMsgpack(appendKey(b, "y"))
	return appendInt(appendKey(b, "sent"), p.SentUnixNano)
}

func (p *MeasurePayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.Y.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with Y aliasing data.
func (p *MeasurePayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v MeasurePayload
	d.mapHeader("MeasurePayload", 2)
	v.Y = d.matrix("y")
	v.SentUnixNano = d.int("sent")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

// instanceFields is what a payload's Inc and Peer (omitted when zero) add
// to its field count, and instanceLen to its length.
func instanceFields(inc, peer uint64) int { return optFields(inc) + optFields(peer) }

func instanceLen(inc, peer uint64) int { return optUintLen("inc", inc) + optUintLen("peer", peer) }

func appendInstance(b []byte, inc, peer uint64) []byte {
	return appendOptUint(appendOptUint(b, "inc", inc), "peer", peer)
}

// An optional unsigned field ("name,omitempty": the instance numbers,
// StateRecord's hwm_idx, the epochs of MaskYPayload, PlantYPayload and
// PlantUPayload), written only when not zero.

func optFields(v uint64) int {
	if v == 0 {
		return 0
	}
	return 1
}

func optUintLen(key string, v uint64) int {
	if v == 0 {
		return 0
	}
	return keyLen(key) + uintLen(v)
}

func appendOptUint(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendUint(appendKey(b, key), v)
}

// optUint reads the optional field key if the map holds it (there): a zero
// written out is refused, as the encoder never writes one.
func (d *decoder) optUint(key string, there bool) uint64 {
	if !there {
		return 0
	}
	v := d.uint(key)
	if v == 0 && d.err == nil {
		d.fail(d.r.errf(key, "zero written out: not in canonical form"))
	}
	return v
}

// optionalFields returns the field count of a map of base fields and up to
// extra optional ones, from its header (base if the header is not one of
// those: mapHeader then says why).
func optionalFields(data []byte, base, extra int) int {
	if len(data) > 0 && data[0] > mpFixMap|byte(base) && data[0] <= mpFixMap|byte(base+extra) {
		return int(data[0] &^ mpFixMap)
	}
	return base
}

// instance reads Inc and Peer, each there only when not zero, and checks that
// the map of n fields held them.
func (d *decoder) instance(what string, n, base int) (inc, peer uint64) {
	inc, peer = d.readInstance(n, base)
	if d.err == nil && base+instanceFields(inc, peer) != n {
		d.fail(d.r.errf(what, "a map of %d fields holds %d", n, base+instanceFields(inc, peer)))
	}
	return inc, peer
}

// readInstance is instance without the field count's check (for a payload
// with more optional fields after them).
func (d *decoder) readInstance(n, base int) (inc, peer uint64) {
	inc = d.optUint("inc", n > base && d.next("inc"))
	peer = d.optUint("peer", n > base && d.next("peer"))
	return inc, peer
}

// serialFields and serialLen are what a MulPayload's Serial (omitted when
// zero) adds to its field count and length.
func serialFields(s Serial) int {
	if s.IsZero() {
		return 0
	}
	return 1
}

func serialLen(s Serial) int {
	if s.IsZero() {
		return 0
	}
	return keyLen("n") + binLen(s[:])
}

func (p MulPayload) encodedLen() int {
	return 1 + keyLen("item") + uintLen(p.Item) + keyLen("ver") + uintLen(p.Version) +
		keyLen("s") + p.S.encodedLen() + keyLen("t") + p.T.encodedLen() + instanceLen(p.Inc, p.Peer) + serialLen(p.Serial)
}

func (p MulPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|byte(4+instanceFields(p.Inc, p.Peer)+serialFields(p.Serial)))
	b = appendUint(appendKey(b, "item"), p.Item)
	b = appendUint(appendKey(b, "ver"), p.Version)
	b = p.S.appendMsgpack(appendKey(b, "s"))
	b = p.T.appendMsgpack(appendKey(b, "t"))
	b = appendInstance(b, p.Inc, p.Peer)
	if !p.Serial.IsZero() {
		b = appendBin(appendKey(b, "n"), p.Serial[:])
	}
	return b
}

func (p *MulPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.S.Data, &p.T.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with S and T aliasing data.
func (p *MulPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v MulPayload
	n := optionalFields(data, 4, 3)
	d.mapHeader("MulPayload", n)
	v.Item = d.uint("item")
	v.Version = d.uint("ver")
	v.S = d.matrix("s")
	v.T = d.matrix("t")
	v.Inc, v.Peer = d.readInstance(n, 4)
	if n > 4 && d.next("n") {
		if v.Serial = Serial(d.nonce("n")); v.Serial.IsZero() && d.err == nil {
			d.fail(d.r.errf("n", "zero written out: not in canonical form"))
		}
	}
	if have := 4 + instanceFields(v.Inc, v.Peer) + serialFields(v.Serial); d.err == nil && have != n {
		d.fail(d.r.errf("MulPayload", "a map of %d fields holds %d", n, have))
	}
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p MaskYPayload) encodedLen() int {
	return 1 + keyLen("item") + uintLen(p.Item) + keyLen("v") + p.V.encodedLen() + optUintLen("epoch", p.Epoch)
}

func (p MaskYPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|byte(2+optFields(p.Epoch)))
	b = appendUint(appendKey(b, "item"), p.Item)
	b = p.V.appendMsgpack(appendKey(b, "v"))
	return appendOptUint(b, "epoch", p.Epoch)
}

func (p *MaskYPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.V.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with V aliasing data.
func (p *MaskYPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v MaskYPayload
	n := optionalFields(data, 2, 1)
	d.mapHeader("MaskYPayload", n)
	v.Item = d.uint("item")
	v.V = d.matrix("v")
	v.Epoch = d.optUint("epoch", n > 2)
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p MeasureMaskedPayload) encodedLen() int {
	return 1 + keyLen("item") + uintLen(p.Item) + keyLen("t") + p.T.encodedLen() + keyLen("sent") + intLen(p.SentUnixNano)
}

func (p MeasureMaskedPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|3)
	b = appendUint(appendKey(b, "item"), p.Item)
	b = p.T.appendMsgpack(appendKey(b, "t"))
	return appendInt(appendKey(b, "sent"), p.SentUnixNano)
}

func (p *MeasureMaskedPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.T.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with T aliasing data.
func (p *MeasureMaskedPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v MeasureMaskedPayload
	d.mapHeader("MeasureMaskedPayload", 3)
	v.Item = d.uint("item")
	v.T = d.matrix("t")
	v.SentUnixNano = d.int("sent")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p TruncPayload) encodedLen() int {
	return 1 + keyLen("item") + uintLen(p.Item) + keyLen("y") + p.Y.encodedLen() + instanceLen(p.Inc, p.Peer)
}

func (p TruncPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|byte(2+instanceFields(p.Inc, p.Peer)))
	b = appendUint(appendKey(b, "item"), p.Item)
	b = p.Y.appendMsgpack(appendKey(b, "y"))
	return appendInstance(b, p.Inc, p.Peer)
}

func (p *TruncPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.Y.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with Y aliasing data.
func (p *TruncPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v TruncPayload
	n := optionalFields(data, 2, 2)
	d.mapHeader("TruncPayload", n)
	v.Item = d.uint("item")
	v.Y = d.matrix("y")
	v.Inc, v.Peer = d.instance("TruncPayload", n, 2)
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p OutputPayload) encodedLen() int {
	return 1 + keyLen("item") + uintLen(p.Item) + keyLen("u") + p.U.encodedLen() + keyLen("sent") + intLen(p.SentUnixNano)
}

func (p OutputPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|3)
	b = appendUint(appendKey(b, "item"), p.Item)
	b = p.U.appendMsgpack(appendKey(b, "u"))
	return appendInt(appendKey(b, "sent"), p.SentUnixNano)
}

func (p *OutputPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.U.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with U aliasing data.
func (p *OutputPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v OutputPayload
	d.mapHeader("OutputPayload", 3)
	v.Item = d.uint("item")
	v.U = d.matrix("u")
	v.SentUnixNano = d.int("sent")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p TickPayload) encodedLen() int {
	return 1 + keyLen("sent") + intLen(p.SentUnixNano)
}

func (p TickPayload) appendMsgpack(b []byte) []byte {
	return appendInt(appendKey(append(b, mpFixMap|1), "sent"), p.SentUnixNano)
}

func (p *TickPayload) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v TickPayload
	d.mapHeader("TickPayload", 1)
	v.SentUnixNano = d.int("sent")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p MaterialPayload) encodedLen() int {
	return 1 + keyLen("nonce") + binHeaderLen(len(p.Nonce)) + len(p.Nonce) +
		keyLen("u") + p.U.encodedLen() + keyLen("v") + p.V.encodedLen() + keyLen("w") + p.W.encodedLen() +
		keyLen("m") + p.M.encodedLen() + keyLen("l") + p.L.encodedLen()
}

func (p MaterialPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|6)
	b = appendBin(appendKey(b, "nonce"), p.Nonce[:])
	b = p.U.appendMsgpack(appendKey(b, "u"))
	b = p.V.appendMsgpack(appendKey(b, "v"))
	b = p.W.appendMsgpack(appendKey(b, "w"))
	b = p.M.appendMsgpack(appendKey(b, "m"))
	return p.L.appendMsgpack(appendKey(b, "l"))
}

func (p *MaterialPayload) unmarshalMsgpack(data []byte) error {
	if err := p.unmarshalView(data); err != nil {
		return err
	}
	own(&p.U.Data, &p.V.Data, &p.W.Data, &p.M.Data, &p.L.Data)
	return nil
}

// unmarshalView is unmarshalMsgpack with the matrices aliasing data.
func (p *MaterialPayload) unmarshalView(data []byte) error {
	d := newDecoder(data)
	var v MaterialPayload
	d.mapHeader("MaterialPayload", 6)
	v.Nonce = d.nonce("nonce")
	v.U = d.matrix("u")
	v.V = d.matrix("v")
	v.W = d.matrix("w")
	v.M = d.matrix("m")
	v.L = d.matrix("l")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (m ItemMsg) encodedLen() int {
	return 1 + keyLen("loop") + strLen(m.Loop) + keyLen("epoch") + uintLen(m.Epoch) +
		keyLen("nonce") + binHeaderLen(len(m.Nonce)) + len(m.Nonce) +
		keyLen("p0") + binLen(m.P0) + keyLen("p1") + binLen(m.P1)
}

func (m ItemMsg) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|5)
	b = appendStr(appendKey(b, "loop"), m.Loop)
	b = appendUint(appendKey(b, "epoch"), m.Epoch)
	b = appendBin(appendKey(b, "nonce"), m.Nonce[:])
	b = appendBin(appendKey(b, "p0"), m.P0)
	return appendBin(appendKey(b, "p1"), m.P1)
}

func (m *ItemMsg) unmarshalMsgpack(data []byte) error {
	if err := m.parse(data); err != nil {
		return err
	}
	own(&m.P0, &m.P1)
	return nil
}

// parse decodes and validates data into m, P0 and P1 aliasing data; on an
// error m is unchanged (as every fast decoder leaves its target).
func (m *ItemMsg) parse(data []byte) error {
	var v ItemMsg
	n, err := v.parsePrefix(data, "")
	if err == nil {
		r := reader{b: data, off: n}
		err = r.end("payload")
	}
	if err == nil {
		err = v.validate()
	}
	if err == nil {
		*m = v
	}
	return err
}

// parsePrefix decodes the item at the start of data into m (P0 and P1
// aliasing data) and returns the number of bytes it took. m.Loop is known
// itself, not a copy, if the item names that loop.
func (m *ItemMsg) parsePrefix(data []byte, known string) (int, error) {
	d := newDecoder(data)
	var v ItemMsg
	d.mapHeader("ItemMsg", 5)
	loop := d.str("loop")
	v.Epoch = d.uint("epoch")
	v.Nonce = d.nonce("nonce")
	v.P0 = d.bytes("p0")
	v.P1 = d.bytes("p1")
	if d.err != nil {
		return 0, d.err
	}
	if string(loop) == known {
		v.Loop = known
	} else {
		v.Loop = string(loop)
	}
	*m = v
	return d.r.off, nil
}

func (p PlantReadPayload) encodedLen() int { return 1 + keyLen("epoch") + uintLen(p.Epoch) }

func (p PlantReadPayload) appendMsgpack(b []byte) []byte {
	return appendUint(appendKey(append(b, mpFixMap|1), "epoch"), p.Epoch)
}

func (p *PlantReadPayload) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v PlantReadPayload
	d.mapHeader("PlantReadPayload", 1)
	v.Epoch = d.uint("epoch")
	if err := d.end(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p PlantYPayload) encodedLen() int {
	return 1 + keyLen("y") + floatsLen(p.Y) + optUintLen("epoch", p.Epoch)
}

func (p PlantYPayload) appendMsgpack(b []byte) []byte {
	b = appendFloats(appendKey(append(b, mpFixMap|byte(1+optFields(p.Epoch))), "y"), p.Y)
	return appendOptUint(b, "epoch", p.Epoch)
}

func (p *PlantYPayload) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v PlantYPayload
	n := optionalFields(data, 1, 1)
	d.mapHeader("PlantYPayload", n)
	v.Y = d.floats("y")
	v.Epoch = d.optUint("epoch", n > 1)
	if err := d.end(); err != nil {
		return err
	}
	if err := v.validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

func (p PlantUPayload) encodedLen() int {
	return 1 + keyLen("u") + floatsLen(p.U) + keyLen("failsafe") + 1 + optUintLen("epoch", p.Epoch)
}

func (p PlantUPayload) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|byte(2+optFields(p.Epoch)))
	b = appendFloats(appendKey(b, "u"), p.U)
	return appendOptUint(appendBool(appendKey(b, "failsafe"), p.FailSafe), "epoch", p.Epoch)
}

func (p *PlantUPayload) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v PlantUPayload
	n := optionalFields(data, 2, 1)
	d.mapHeader("PlantUPayload", n)
	v.U = d.floats("u")
	v.FailSafe = d.bool("failsafe")
	v.Epoch = d.optUint("epoch", n > 2)
	if err := d.end(); err != nil {
		return err
	}
	if err := v.validate(); err != nil {
		return err
	}
	*p = v
	return nil
}

// fields is the number of fields StateRecord encodes (hwm_idx is omitted
// when zero, serials when empty).
func (r StateRecord) fields() int {
	n := 8 + optFields(r.HWMIdx)
	if len(r.Serials) != 0 {
		n++
	}
	return n
}

func (r StateRecord) encodedLen() int {
	n := 1 + keyLen("instance") + uintLen(r.Instance) + keyLen("epoch") + uintLen(r.Epoch) +
		keyLen("version") + uintLen(r.Version) + keyLen("tick") + uintLen(r.Tick) + keyLen("hwm") + uintLen(r.HWM) +
		keyLen("x") + r.X.encodedLen() + keyLen("prev") + r.Prev.encodedLen() + keyLen("has_prev") + 1 +
		optUintLen("hwm_idx", r.HWMIdx)
	if len(r.Serials) != 0 {
		n += keyLen("serials") + binHeaderLen(len(r.Serials)) + len(r.Serials)
	}
	return n
}

func (r StateRecord) appendMsgpack(b []byte) []byte {
	b = append(b, mpFixMap|byte(r.fields()))
	b = appendUint(appendKey(b, "instance"), r.Instance)
	b = appendUint(appendKey(b, "epoch"), r.Epoch)
	b = appendUint(appendKey(b, "version"), r.Version)
	b = appendUint(appendKey(b, "tick"), r.Tick)
	b = appendUint(appendKey(b, "hwm"), r.HWM)
	b = appendOptUint(b, "hwm_idx", r.HWMIdx)
	b = r.X.appendMsgpack(appendKey(b, "x"))
	b = r.Prev.appendMsgpack(appendKey(b, "prev"))
	b = appendBool(appendKey(b, "has_prev"), r.HasPrev)
	if len(r.Serials) != 0 {
		b = appendBin(appendKey(b, "serials"), r.Serials)
	}
	return b
}

func (r *StateRecord) unmarshalMsgpack(data []byte) error {
	d := newDecoder(data)
	var v StateRecord
	// 8 fields, and hwm_idx and serials when present (fields).
	n := optionalFields(data, 8, 2)
	d.mapHeader("StateRecord", n)
	v.Instance = d.uint("instance")
	v.Epoch = d.uint("epoch")
	v.Version = d.uint("version")
	v.Tick = d.uint("tick")
	v.HWM = d.uint("hwm")
	v.HWMIdx = d.optUint("hwm_idx", n > 8 && d.next("hwm_idx"))
	v.X = d.matrix("x")
	v.Prev = d.matrix("prev")
	v.HasPrev = d.bool("has_prev")
	if n > 8 && d.next("serials") {
		if v.Serials = d.bytes("serials"); len(v.Serials) == 0 && d.err == nil {
			d.fail(d.r.errf("serials", "empty written out: not in canonical form"))
		}
	}
	if d.err == nil && v.fields() != n {
		d.fail(d.r.errf("StateRecord", "a map of %d fields holds %d", n, v.fields()))
	}
	if err := d.end(); err != nil {
		return err
	}
	own(&v.X.Data)
	own(&v.Prev.Data)
	own(&v.Serials)
	*r = v
	return nil
}
