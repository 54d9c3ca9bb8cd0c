package bench

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// BenchmarkTickCPU is the CPU cost of one controller tick without the
// network: every step the services do on the tick path (sealing, msgpack,
// item decoding, Protocols 1 and 2, reconstruction), in one goroutine, with
// the time of each step reported as a metric (ns per tick). It shows what the
// secure tick adds to the floor on each hop (item decoding and preparation,
// which the party does ahead of the tick, are reported apart):
//
//	go test ./internal/bench -run '^$' -bench TickCPU
func BenchmarkTickCPU(b *testing.B) {
	cs, _ := pendulum(b)
	for _, c := range []struct {
		name string
		cs   mpc.ControllerSpec
		v    mpc.Variant
	}{{"pendulum/fixed", cs, mpc.FixedMask}, {"pendulum/per-tick", cs, mpc.PerTick}, {"n32/fixed", RandomController(32, 1, 1), mpc.FixedMask}} {
		b.Run(c.name, func(b *testing.B) { benchTickCPU(b, c.cs, c.v) })
	}
}

func benchTickCPU(b *testing.B, cs mpc.ControllerSpec, v mpc.Variant) {
	rz, err := cs.Resolve(v)
	if err != nil {
		b.Fatal(err)
	}
	prm, f := rz.Params, rz.Params.Field
	ids, err := newIdentities()
	if err != nil {
		b.Fatal(err)
	}
	seal := map[codec.Role]*codec.Sealer{}
	for _, r := range codec.AllRoles {
		if seal[r], err = ids.sealer(r); err != nil {
			b.Fatal(err)
		}
	}
	var secret [32]byte
	rand.Read(secret[:])
	sess := mpc.NewSession(secret)
	rng := mpc.NewPRG(secret, [16]byte{1})
	phi0, phi1, _ := f.Share(rng, rz.Phi)
	x0, x1, _ := f.Share(rng, rz.X0)
	var p [2]*mpc.Party
	if p[0], err = mpc.NewParty(prm, 0, phi0, x0); err != nil {
		b.Fatal(err)
	}
	if p[1], err = mpc.NewParty(prm, 1, phi1, x1); err != nil {
		b.Fatal(err)
	}
	if v == mpc.FixedMask {
		u0, u1, _ := sess.FixedUShares(prm)
		if err := mpc.FixedSetup(p[0], p[1], u0, u1); err != nil {
			b.Fatal(err)
		}
	}
	dl, err := mpc.NewDealer(prm, sess, true)
	if err != nil {
		b.Fatal(err)
	}
	const loop = "pendulum"
	// Items as the dealer publishes them (pre-generated: the dealer is offline).
	items := make([][]byte, b.N)
	for i := range items {
		it, _ := dl.Next(rng)
		body, _ := codec.Marshal(codec.PutMaterial(f, it.Nonce, it.P1))
		env, err := seal[codec.RoleDealer].Seal(codec.Header{Kind: codec.KindMaterial, Loop: loop, Tick: 1, From: codec.RoleDealer, To: codec.RoleParty1}, body)
		if err != nil {
			b.Fatal(err)
		}
		items[i], _ = codec.Marshal(codec.ItemMsg{Loop: loop, Epoch: 1, Nonce: it.Nonce, P0: it.Tag[:], P1: env})
	}
	guards := [4]*codec.ReplayGuard{codec.NewReplayGuard(), codec.NewReplayGuard(), codec.NewReplayGuard(), codec.NewReplayGuard()}
	y := make([]float64, prm.P)
	yEnc, ys := mpc.NewMatrix(prm.P, 1), [2]mpc.Matrix{mpc.NewMatrix(prm.P, 1), mpc.NewMatrix(prm.P, 1)}
	var tSensor, tItem, tMeasure, tMul, tTrunc, tAct time.Duration
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	// The parties open and seal as the party service does: into buffers
	// kept per loop (internal/party worker), the published copy standing
	// for the one nats.Conn.Publish makes into its write buffer.
	type partyBufs struct{ body, env, open, item []byte }
	var pb [2]partyBufs
	var wire [2][3][]byte // per party: Mul, Trunc, Output as published
	open := func(j int, g *codec.ReplayGuard, env []byte, v any) codec.Header {
		h, body, err := seal[codec.PartyRole(j)].OpenScratch(&pb[j].open, env)
		must(err)
		must(g.Admit(h, body, v, nil))
		return h
	}
	sealTo := func(from, to codec.Role, kind codec.Kind, t uint64, payload any) []byte {
		body, err := codec.Marshal(payload)
		must(err)
		env, err := seal[from].Seal(codec.Header{Kind: kind, Loop: loop, Tick: t, From: from, To: to}, body)
		must(err)
		return env
	}
	sealParty := func(j, slot int, to codec.Role, kind codec.Kind, t uint64, payload any) []byte {
		from := codec.PartyRole(j)
		body, err := codec.MarshalAppend(pb[j].body[:0], payload)
		must(err)
		pb[j].body = body
		env, err := seal[from].SealAppend(pb[j].env[:0], codec.Header{Kind: kind, Loop: loop, Tick: t, From: from, To: to}, body)
		must(err)
		pb[j].env = env
		wire[j][slot] = append(wire[j][slot][:0], env...)
		return wire[j][slot]
	}
	p0 := mpc.NewExpander(prm, sess.P0Seed())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tk := uint64(i + 1)
		// Sensor: encode, share, seal the tick notice and both measurements.
		t0 := time.Now()
		must(f.EcdInto(yEnc.Data, y, prm.K, prm.L))
		must(f.ShareInto(rng, yEnc, ys[0], ys[1]))
		now := time.Now().UnixNano()
		_ = sealTo(codec.RoleSensor, codec.RoleActuator, codec.KindTick, tk, codec.TickPayload{SentUnixNano: now})
		var meas [2][]byte
		for j := range meas {
			meas[j] = sealTo(codec.RoleSensor, codec.PartyRole(j), codec.KindMeasure, tk, codec.MeasurePayload{Y: codec.PutMatrix(f, ys[j]), SentUnixNano: now})
		}
		t1 := time.Now()
		tSensor += t1.Sub(t0)
		// Each party: open the measurement, take the item, Begin, seal Mul.
		var mul [2][]byte
		for j := range mul {
			ta := time.Now()
			var mp codec.MeasurePayload
			open(j, guards[j], meas[j], &mp)
			yj := mpc.NewMatrix(prm.P, 1)
			must(mp.Y.DecodeInto(f, yj))
			ti := time.Now()
			it, err := codec.PeekItem(items[i])
			must(err)
			var mat mpc.TickMaterial
			if j == 0 {
				if !p0.CheckTag(it.Nonce, [mpc.ItemTagLen]byte(it.P0)) {
					b.Fatal("party0: the item's tag does not match its nonce")
				}
				mat, err = p0.Expand(it.Nonce)
			} else {
				_, body, err2 := seal[codec.RoleParty1].OpenScratch(&pb[1].item, it.P1)
				must(err2)
				var m codec.MaterialPayload
				must(codec.Unmarshal(body, &m))
				mat, err = m.Material(prm)
			}
			must(err)
			// The service decodes and prepares items ahead (off the path).
			must(p[j].Prepare(&mat))
			di := time.Since(ti)
			tItem += di
			msg, err := p[j].Begin(yj, mat)
			must(err)
			out := codec.MulPayload{Item: tk, Version: tk - 1, T: codec.PutMatrix(f, msg.T)}
			if v == mpc.PerTick {
				out.S = codec.PutMatrix(f, msg.S)
			}
			mul[j] = sealParty(j, 0, codec.PartyRole(1-j), codec.KindMul, tk, out)
			tMeasure += (time.Since(ta) - di) / 2 // the parties run in parallel: the average of the two
		}
		// Each party: open the peer's Mul, compute and seal the output share
		// (Output); then, off the actuation path, the state rows and
		// Protocol 2's first step (TruncStart), and P0 seals Trunc.
		var outs [2][]byte
		var trunc []byte
		r, c := prm.PhiShape()
		for j := range outs {
			ta := time.Now()
			var mp codec.MulPayload
			open(j, guards[2+j], mul[1-j], &mp)
			var in mpc.MulMsg
			in.T, err = mp.T.Decode(f, c, 1)
			must(err)
			if v == mpc.PerTick {
				in.S, err = mp.S.Decode(f, r, c)
				must(err)
			}
			u, err := p[j].Output(in)
			must(err)
			outs[j] = sealParty(j, 2, codec.RoleActuator, codec.KindOutput, tk, codec.OutputPayload{Item: tk, U: codec.PutMatrix(f, u)})
			tb := time.Now()
			tMul += tb.Sub(ta) / 2
			tr, err := p[j].TruncStart()
			must(err)
			if j == 0 {
				trunc = sealParty(0, 1, codec.RoleParty1, codec.KindTrunc, tk, codec.TruncPayload{Item: tk, Y: codec.PutMatrix(f, tr.Y)})
			}
			tTrunc += time.Since(tb)
		}
		// Off the actuation path: P0 finishes, P1 opens Trunc and finishes
		// (the state persistence is not included).
		ta := time.Now()
		must(p[0].Finish(nil))
		var tp codec.TruncPayload
		open(1, guards[1], trunc, &tp)
		ty, err := tp.Y.Decode(f, prm.N, 1)
		must(err)
		must(p[1].Finish(&mpc.TruncMsg{Y: ty}))
		tTrunc += time.Since(ta)
		// Actuator: open both shares, reconstruct, decode.
		ta = time.Now()
		var us [2]mpc.Matrix
		for j := range outs {
			_, body, err := seal[codec.RoleActuator].Open(outs[j])
			must(err)
			var op codec.OutputPayload
			must(codec.Unmarshal(body, &op))
			us[j], err = op.U.Decode(f, prm.M, 1)
			must(err)
		}
		z := mpc.NewMatrix(prm.M, 1)
		f.Reconst(z, us[0], us[1])
		uf := make([]float64, prm.M)
		f.DcdInto(uf, z.Data, 2*prm.L)
		tAct += time.Since(ta) / 2 // one share is opened while the other is in flight
	}
	n := float64(b.N)
	b.ReportMetric(float64(tSensor.Nanoseconds())/n, "sensor-ns")
	b.ReportMetric(float64(tMeasure.Nanoseconds())/n, "party-measure-ns")
	b.ReportMetric(float64(tItem.Nanoseconds())/n/2, "item-decode-ns")
	b.ReportMetric(float64(tMul.Nanoseconds())/n, "party-mul-ns")
	b.ReportMetric(float64(tAct.Nanoseconds())/n, "actuator-ns")
	b.ReportMetric(float64(tTrunc.Nanoseconds())/n, "offpath-trunc-ns")
	b.ReportMetric(float64((tSensor+tMeasure+tMul+tAct).Nanoseconds())/n, "critical-path-ns")
}
