package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/duet-mpc/duet/pkg/codec"
	"github.com/duet-mpc/duet/pkg/mpc"
)

// Fig. 5 of the paper (protocol.md §9): the round trip at the client, from
// sending the input shares to receiving the output shares, of Protocol 1
// alone (d1 = d2 = d, d3 = 1) and of Protocol 2 alone (d x 1), over NATS.
//
// The client seals each party's input share (codec.MeasurePayload, sensor
// role) and opens both output shares (codec.OutputPayload, actuator role);
// two responders run the protocol with pkg/mpc's primitives and exchange
// sealed codec.MulPayload / codec.TruncPayload messages. Dealer material is
// drawn before timing. After each repetition (outside the timing) the client
// reconstructs the output and checks it against the result computed in the
// clear: Z = X Y mod q exactly for Protocol 1, Z - round(X / 2^l) in
// {-1, 0, 1} for Protocol 2 (its probabilistic error, protocol.md §5).
//
// In Protocol 1, X is the constant operand (like Φ̄ in the controller): it is
// shared to the parties once at set-up, and each repetition the client sends
// fresh shares of Y. Per-tick: a fresh triple (U, V, W) per repetition and
// the parties exchange S and T; fixed mask: S = X - U is opened at set-up and
// only T travels.

// Series is one line of Fig. 5.
type Series struct {
	Protocol int         // 1 or 2
	Variant  mpc.Variant // Protocol 1 only
}

// Name is "protocol1/per-tick", "protocol1/fixed" or "protocol2".
func (s Series) Name() string {
	if s.Protocol == 2 {
		return "protocol2"
	}
	return "protocol1/" + s.Variant.String()
}

// Fig5Series are the three series measured.
var Fig5Series = []Series{{1, mpc.PerTick}, {1, mpc.FixedMask}, {2, 0}}

// Fig5Options configure RunFig5.
type Fig5Options struct {
	URL    string
	Ds     []int
	Reps   int
	Warmup int           // untimed repetitions first (default 10)
	Gap    time.Duration // pause after each repetition and each floor tick
	Field  *mpc.Field    // default 2^127-1
	L      int           // Protocol 2's l (default 9, the pendulum's)
	Lambda int           // Protocol 2's λ (default 40)
	Seed   [32]byte      // inputs and material come from a PRG under this seed
	Series []Series      // default Fig5Series
}

// Fig5Row is one point of Fig. 5 with its floor.
type Fig5Row struct {
	Series Series
	D      int
	Lat    Stats // client round trip
	Floor  Stats // same topology and message sizes, no computation or encryption
	Sizes  FloorSizes
	// BytesP0 and BytesP1 are the envelope bytes each party sends per
	// repetition (exchange message(s) and output share).
	BytesP0, BytesP1 int
	Checked          int // repetitions whose output the client verified
	// Prepared counts the fixed-mask parties' repetitions (both parties)
	// closed with the product prepared ahead (mpc.Field.MulClosePrepared).
	Prepared int
}

// BytesPerParty is the larger of the two parties' bytes per repetition.
func (r Fig5Row) BytesPerParty() int { return max(r.BytesP0, r.BytesP1) }

// ErrWrongResult means a protocol run reconstructed to the wrong value.
var ErrWrongResult = errors.New("bench: reconstructed output differs from the result computed in the clear")

func (o *Fig5Options) defaults() error {
	if o.Field == nil {
		f, err := mpc.ParseModulus(mpc.PresetM127)
		if err != nil {
			return err
		}
		o.Field = f
	}
	if o.L == 0 {
		o.L = 9
	}
	if o.Lambda == 0 {
		o.Lambda = 40
	}
	if o.Warmup == 0 {
		o.Warmup = 10
	}
	if o.Reps <= 0 {
		o.Reps = 100
	}
	if len(o.Series) == 0 {
		o.Series = Fig5Series
	}
	if o.Seed == ([32]byte{}) {
		if _, err := rand.Read(o.Seed[:]); err != nil {
			return err
		}
	}
	return nil
}

// RunFig5 measures every series at every d.
func RunFig5(ctx context.Context, opt Fig5Options) ([]Fig5Row, error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	ids, err := newIdentities()
	if err != nil {
		return nil, err
	}
	var rows []Fig5Row
	for _, s := range opt.Series {
		for _, d := range opt.Ds {
			row, err := runFig5Point(ctx, opt, ids, s, d)
			if err != nil {
				return rows, fmt.Errorf("bench: %s d=%d: %w", s.Name(), d, err)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// fig5Proto is one protocol's client-side data and party behaviour.
type fig5Proto interface {
	// input returns both parties' input shares for repetition t (1-based).
	input(t uint64) (y0, y1 mpc.Matrix)
	// check verifies the reconstructed output of repetition t.
	check(t uint64, z mpc.Matrix) error
	// party returns party i's message handlers.
	party(i int) partyLogic
	outRows() int
}

// partyLogic runs one party of a protocol; it is called from one goroutine.
type partyLogic interface {
	measure(r *responder, t uint64, y codec.MatrixWire) error
	peer(r *responder, h codec.Header, body []byte) error
}

func runFig5Point(ctx context.Context, opt Fig5Options, ids *identities, s Series, d int) (Fig5Row, error) {
	row := Fig5Row{Series: s, D: d}
	total := opt.Warmup + opt.Reps
	nonce := [16]byte{byte(s.Protocol), byte(s.Variant), byte(d), byte(d >> 8)}
	rng := mpc.NewPRG(opt.Seed, nonce)
	var proto fig5Proto
	var err error
	if s.Protocol == 1 {
		// The fixed-mask parties prepare the next repetition halfway through
		// the client's first pause, when nothing else runs (not during the
		// interleaved floor tick).
		proto, err = newMulProto(opt.Field, s.Variant, d, total, rng, opt.Gap/2)
	} else {
		proto, err = newTruncProto(opt.Field, d, total, opt.L, opt.Lambda, rng)
	}
	if err != nil {
		return row, err
	}
	loop := "f5-" + uniqueTag()
	var resp [2]*responder
	for i := range resp {
		if resp[i], err = startResponder(opt.URL, ids, loop, i, proto.party(i)); err != nil {
			return row, err
		}
		defer resp[i].close()
	}
	cl, err := newFig5Client(opt.URL, ids, loop, opt.Field, proto.outRows())
	if err != nil {
		return row, err
	}
	defer cl.close()
	// Sizes are known after the first repetition; the floor starts then.
	var floor *FloorRig
	defer func() {
		if floor != nil {
			floor.Close()
		}
	}()
	var lat, flat []time.Duration
	for t := uint64(1); t <= uint64(total); t++ {
		y0, y1 := proto.input(t)
		z, took, err := cl.roundTrip(ctx, t, y0, y1)
		if err != nil {
			for _, r := range resp {
				if rerr := r.failure(); rerr != nil {
					return row, fmt.Errorf("%w (party%d: %v)", err, r.id, rerr)
				}
			}
			return row, err
		}
		if err := proto.check(t, z); err != nil {
			return row, err
		}
		row.Checked++
		if floor == nil {
			row.Sizes = FloorSizes{Measure: cl.measureBytes(), Exchange: resp[0].exchangeBytes(), Output: resp[0].outputBytes(), OneWay: s.Protocol == 2}
			if floor, err = NewFloorRig(opt.URL, row.Sizes); err != nil {
				return row, err
			}
		}
		if int(t) > opt.Warmup {
			lat = append(lat, took)
		}
		sleep(opt.Gap)
		// The floor tick runs interleaved, so both see the same machine load.
		fl, err := floor.Run(ctx, 1, 0)
		if err != nil {
			return row, err
		}
		if int(t) > opt.Warmup {
			flat = append(flat, fl...)
		}
		sleep(opt.Gap)
	}
	row.Lat, row.Floor = Summarize(lat), Summarize(flat)
	if mp, ok := proto.(*mulProto); ok {
		row.Prepared = mp.parties[0].preparedUses() + mp.parties[1].preparedUses()
	}
	row.BytesP0, row.BytesP1 = resp[0].bytesPerTick(), resp[1].bytesPerTick()
	return row, nil
}

func sleep(d time.Duration) {
	if d > 0 {
		time.Sleep(d)
	}
}
