package codec

import (
	"fmt"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// OpenSetup opens a loop's sealed set-up record (KindSetup from the sensor,
// as the party and the actuator read it from the set-up bucket) and returns
// the payload with its validated parameters.
func OpenSetup(s *Sealer, data []byte, loop string) (SetupPayload, mpc.Params, error) {
	var sp SetupPayload
	h, body, err := s.Open(data)
	if err != nil {
		return sp, mpc.Params{}, err
	}
	if h.Kind != KindSetup || h.From != RoleSensor || h.Loop != loop {
		return sp, mpc.Params{}, fmt.Errorf("%w: set-up record is %s from %s for loop %q", ErrHeader, h.Kind, h.From, h.Loop)
	}
	if err := Unmarshal(body, &sp); err != nil {
		return sp, mpc.Params{}, err
	}
	prm, err := sp.Params.Params()
	return sp, prm, err
}

// SetupPayload (KindSetup, sensor -> party i) starts or replaces a loop's
// set-up epoch at a party: the parameters and the party's shares of Φ̄
// ((n+m) x (n+p)) and x̄_0 (n x 1).
type SetupPayload struct {
	Epoch  uint64     `msgpack:"epoch"`
	Params ParamsWire `msgpack:"params"`
	Phi    MatrixWire `msgpack:"phi"`
	X0     MatrixWire `msgpack:"x0"`
	// P0Seed is the session's 32-byte P0 seed (mpc.Session.P0Seed), for
	// party0 only; empty for party1.
	P0Seed []byte `msgpack:"p0seed"`
	// FixedU is party1's share of the fixed mask U in the fixed-mask variant
	// (party0 derives its share from P0Seed); empty otherwise.
	FixedU MatrixWire `msgpack:"fixedu"`
	// Stream names the JetStream stream carrying the dealer's items.
	Stream string `msgpack:"stream"`
	// ItemsPerMsg is the most items one stream message holds (0 or 1: one,
	// as in earlier releases, which do not know the field).
	ItemsPerMsg int `msgpack:"items_per_msg,omitempty"`
	// P0Sealed, in party0's record, says the set-up's items carry party0's
	// share sealed (seed compression off): party0 then refuses an item
	// without it, which a broker could otherwise strip so that party0
	// expands the genuine nonce as if the item were compressed (material
	// party1 does not have, under a serial both parties agree on). False:
	// compressed items, or a sensor of an earlier release. An earlier
	// party refuses a record with the field, as it does ItemsPerMsg.
	P0Sealed bool `msgpack:"p0_sealed,omitempty"`
}

func (p *SetupPayload) validate() error {
	if p.ItemsPerMsg < 0 || p.ItemsPerMsg > MaxItemsPerMsg {
		return fmt.Errorf("%w: %d items per stream message, want 1..%d", ErrMalformed, p.ItemsPerMsg, MaxItemsPerMsg)
	}
	if len(p.P0Seed) != 0 && len(p.P0Seed) != 32 {
		return fmt.Errorf("%w: P0 seed has %d bytes, want 32 or none", ErrMalformed, len(p.P0Seed))
	}
	return nil
}

// DealerSetupPayload (KindDealerSetup, sensor -> dealer) registers a loop
// with the dealer replicas.
type DealerSetupPayload struct {
	Epoch  uint64     `msgpack:"epoch"`
	Params ParamsWire `msgpack:"params"`
	// Secret is the 32-byte session secret (mpc.NewSession).
	Secret   []byte `msgpack:"secret"`
	Compress bool   `msgpack:"compress"`
	// Stream and Subject are where the dealer publishes the loop's items.
	Stream  string `msgpack:"stream"`
	Subject string `msgpack:"subject"`
	// ItemsPerMsg is how many items the dealer puts in one stream message
	// (0 or 1: one, as in earlier releases, which do not know the field).
	ItemsPerMsg int `msgpack:"items_per_msg,omitempty"`
}

func (p *DealerSetupPayload) validate() error {
	if p.ItemsPerMsg < 0 || p.ItemsPerMsg > MaxItemsPerMsg {
		return fmt.Errorf("%w: %d items per stream message, want 1..%d", ErrMalformed, p.ItemsPerMsg, MaxItemsPerMsg)
	}
	if len(p.Secret) != 32 {
		return fmt.Errorf("%w: session secret has %d bytes, want 32", ErrMalformed, len(p.Secret))
	}
	return nil
}

// Bytes32 converts a 32-byte field (a seed or a secret) to an array.
func Bytes32(b []byte) ([32]byte, error) {
	if len(b) != 32 {
		return [32]byte{}, fmt.Errorf("%w: %d bytes, want 32", ErrMalformed, len(b))
	}
	return [32]byte(b), nil
}
