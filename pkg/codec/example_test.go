package codec_test

import (
	"fmt"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// A sensor sends party0 its share of y_t; party0 opens, checks freshness and
// decodes it.
func Example() {
	sensorID, _ := codec.GenerateIdentity()
	party0ID, _ := codec.GenerateIdentity()
	peers := map[codec.Role]string{
		codec.RoleSensor: sensorID.PublicKey(),
		codec.RoleParty0: party0ID.PublicKey(),
	}
	sensor, _ := codec.NewSealer(codec.RoleSensor, sensorID, peers)
	party0, _ := codec.NewSealer(codec.RoleParty0, party0ID, peers)

	f, _ := mpc.ParseModulus(mpc.PresetM127)
	y := mpc.Matrix{Rows: 2, Cols: 1, Data: []mpc.Elem{f.FromInt64(3), f.FromInt64(-4)}}
	payload, _ := codec.Marshal(&codec.MeasurePayload{Y: codec.PutMatrix(f, y)})
	env, _ := sensor.Seal(codec.Header{Kind: codec.KindMeasure, Loop: "demo", Tick: 1, From: codec.RoleSensor, To: codec.RoleParty0}, payload)

	guard := codec.NewReplayGuard()
	receive := func(env []byte) (mpc.Matrix, error) {
		h, body, err := party0.Open(env)
		if err != nil {
			return mpc.Matrix{}, err
		}
		if err := guard.Accept(h); err != nil {
			return mpc.Matrix{}, err
		}
		var mp codec.MeasurePayload
		if err := codec.Unmarshal(body, &mp); err != nil {
			return mpc.Matrix{}, err
		}
		return mp.Y.Decode(f, 2, 1)
	}
	got, err := receive(env)
	fmt.Println(f.String(got.At(0, 0)), f.String(got.At(1, 0)), err)

	// The broker replays the envelope.
	_, err = receive(env)
	fmt.Println(codec.Reason(err))
	// Output:
	// 3 -4 <nil>
	// replay
}
