package codec

import (
	"fmt"
	"math"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// Payload types, one per Kind. Each travels as the sealed payload of an
// envelope of its kind (ItemMsg is the exception: it carries envelopes).
// Shapes are not checked by Unmarshal, which does not know the loop's
// parameters; decode matrices with MatrixWire.Decode against them.

// MeasurePayload (KindMeasure, sensor -> party i) is the party's share of
// ȳ_t (p x 1).
type MeasurePayload struct {
	Y            MatrixWire `msgpack:"y"`
	SentUnixNano int64      `msgpack:"sent"`
}

// MulPayload (KindMul, party -> other party) is a Protocol 1 message: the
// sender's shares of S = Φ̄ - U ((n+m) x (n+p)) and T = ξ - V ((n+p) x 1). S is
// empty (0 x 0) in the fixed-mask variant.
type MulPayload struct {
	Item uint64 `msgpack:"item"`
	// Version is the number of state updates the sender has completed; the
	// parties compare it to detect a lost Protocol 2 message.
	Version uint64     `msgpack:"ver"`
	S       MatrixWire `msgpack:"s"`
	T       MatrixWire `msgpack:"t"`
	// Inc and Peer bind the message to instances of the two parties (each
	// omitted when zero). Inc is the sender's instance: the revision at
	// which it claimed its loop's state record (its single-writer fence),
	// so a later instance of the same party has a larger one; 0 is an
	// instance without persisted state, or a party of an earlier release.
	// Peer is the recipient's instance the sender works with: the latest it
	// has heard from. A party refuses the messages of an earlier instance
	// of the other party than the one it works with (ErrInstance), and an
	// instance that is sent a later Peer than its own has been replaced.
	Inc  uint64 `msgpack:"inc,omitempty"`
	Peer uint64 `msgpack:"peer,omitempty"`
	// Serial is the item's serial as its nonce (mpc.ItemSerial.Nonce), the
	// one the dealer sealed into each party's share (P0's seed-compressed
	// share is the nonce itself), in KindMul and KindPreT (omitted when
	// zero: a party of an earlier release, and the set-up's messages). Item
	// is the stream sequence, which the broker assigns: a broker that hands
	// the parties different items under one sequence (or P0 a forged nonce)
	// is caught here, and the tick abandoned, instead of u and the state
	// update being wrong.
	Serial Serial `msgpack:"n,omitempty"`
}

// Serial is an offline item's 16-byte nonce (mpc.ItemSerial.Nonce), which
// names the item; zero is none.
type Serial [16]byte

// IsZero reports whether s is none (msgpack's omitempty).
func (s Serial) IsZero() bool { return s == Serial{} }

// PutMul encodes one tick's Protocol 1 message.
func PutMul(f *mpc.Field, item uint64, m mpc.MulMsg) MulPayload {
	return MulPayload{Item: item, S: PutMatrix(f, m.S), T: PutMatrix(f, m.T)}
}

// Msg decodes a tick's Protocol 1 message, checking its shapes against p:
// S is (n+m) x (n+p) in the per-tick variant and 0 x 0 in the fixed one.
func (w MulPayload) Msg(p mpc.Params) (mpc.MulMsg, error) {
	r, c := p.PhiShape()
	var m mpc.MulMsg
	var err error
	if p.Variant == mpc.PerTick {
		if m.S, err = w.S.decode(p.Field, r, c, "S"); err != nil {
			return mpc.MulMsg{}, err
		}
	} else if !w.S.Empty() {
		return mpc.MulMsg{}, fmt.Errorf("%w: S is %dx%d, want 0x0 in the fixed-mask variant", ErrDimension, w.S.Rows, w.S.Cols)
	}
	if m.T, err = w.T.decode(p.Field, c, 1, "T"); err != nil {
		return mpc.MulMsg{}, err
	}
	return m, nil
}

// TruncPayload (KindTrunc, party0 -> party1) is the Protocol 2 message
// [[Y]]_0 (n x 1).
type TruncPayload struct {
	Item uint64     `msgpack:"item"`
	Y    MatrixWire `msgpack:"y"`
	// Inc and Peer: as in MulPayload.
	Inc  uint64 `msgpack:"inc,omitempty"`
	Peer uint64 `msgpack:"peer,omitempty"`
}

// OutputPayload (KindOutput, party -> actuator) is the party's share of ū_t
// (m x 1, scale 2^(2l)), with the sensor's stamp of the tick's measurement
// (its SentUnixNano), from which the actuator dates the tick: its deadline
// and its latency. The sensor's tick notice, which also carries it, comes
// after the tick (TickPayload).
type OutputPayload struct {
	Item         uint64     `msgpack:"item"`
	U            MatrixWire `msgpack:"u"`
	SentUnixNano int64      `msgpack:"sent"`
}

// MaskYPayload (KindMaskY, party i -> sensor) is the party's share of the
// measurement rows of V (p x 1) of the offline item it will use for the
// next tick (two-hop tick): the sensor adds both parties' shares of the same
// item and pads ȳ with the sum. It never carries the state rows of V.
type MaskYPayload struct {
	Item uint64     `msgpack:"item"`
	V    MatrixWire `msgpack:"v"`
	// Epoch is the sender's set-up epoch, which the sensor checks: a new
	// set-up numbers its ticks from 1 again, and a mask share of an earlier
	// set-up, replayed, would pad a measurement with a mask already used.
	// Omitted when zero (a party of an earlier release sends none).
	Epoch uint64 `msgpack:"epoch,omitempty"`
}

// MeasureMaskedPayload (KindMeasureMasked, sensor -> party i) is T_y = ȳ_t -
// V_y for the item both parties announced (MaskYPayload): the same to both
// parties, which open the state part of T between ticks (KindPreT).
type MeasureMaskedPayload struct {
	Item         uint64     `msgpack:"item"`
	T            MatrixWire `msgpack:"t"`
	SentUnixNano int64      `msgpack:"sent"`
}

// TickPayload (KindTick, sensor -> actuator) announces a tick, after its
// measurements (sensor.Options.NoticeDelay): the actuator learns of a tick
// whose output shares never come, and applies the fail-safe at its
// deadline.
type TickPayload struct {
	SentUnixNano int64 `msgpack:"sent"`
}

// PlantReadPayload (KindPlantY, sensor -> plant: the request) asks the
// plant for its measurement at the envelope's tick. Epoch is the sensor's
// set-up epoch: a new set-up numbers its ticks from 1 again, so the plant
// takes a read of a later epoch as a new set-up (its tick numbers start
// afresh) and refuses one of an earlier epoch, and echoes the epoch in its
// answer (PlantYPayload.Epoch). A sensor of an earlier release sends an
// empty body: epoch 0.
type PlantReadPayload struct {
	Epoch uint64 `msgpack:"epoch"`
}

// PlantYPayload (KindPlantY, plant -> sensor) is a plant measurement.
type PlantYPayload struct {
	Y []float64 `msgpack:"y"`
	// Epoch is the read's (PlantReadPayload), which the sensor checks: a
	// broker that kept an earlier set-up's answers could otherwise replay
	// one as the answer to a read of the same tick number. Omitted when
	// zero.
	Epoch uint64 `msgpack:"epoch,omitempty"`
}

func (p *PlantYPayload) validate() error { return finite("y", p.Y) }

// PlantUPayload (KindPlantU, actuator -> plant) is a plant input.
type PlantUPayload struct {
	U        []float64 `msgpack:"u"`
	FailSafe bool      `msgpack:"failsafe"`
	// Epoch is the actuator's set-up epoch: the plant takes inputs of the
	// set-up it is read for only, so that an earlier set-up's inputs,
	// replayed, are refused. Omitted when zero.
	Epoch uint64 `msgpack:"epoch,omitempty"`
}

func (p *PlantUPayload) validate() error { return finite("u", p.U) }

func finite(name string, x []float64) error {
	for i, v := range x {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: %s[%d] = %v is not finite", ErrMalformed, name, i, v)
		}
	}
	return nil
}
