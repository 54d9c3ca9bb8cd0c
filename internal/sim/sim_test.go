package sim

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

func specs(t *testing.T) (mpc.ControllerSpec, plant.Spec) {
	t.Helper()
	cs, ps, _, err := LoadSpecs("../../examples/qube-servo2/controller.json", "../../examples/qube-servo2/plant.json")
	if err != nil {
		t.Fatal(err)
	}
	return cs, ps
}

// TestPendulumBalances is `duet sim` on the shipped example: from 3 s on
// (tick 75 at 40 ms) |α| < 1.5°, for both variants, and the secure input stays
// within the a-priori bound of the plaintext one.
func TestPendulumBalances(t *testing.T) {
	cs, ps := specs(t)
	for _, v := range []mpc.Variant{mpc.PerTick, mpc.FixedMask} {
		seed := uint64(3)
		var trace bytes.Buffer
		maxAlpha, observed := 0.0, 0
		observe := func(tick int, y, _, _ []float64) {
			if tick != observed {
				t.Fatalf("%v: observed tick %d, want %d", v, tick, observed)
			}
			observed++
			if tick >= 75 {
				maxAlpha = math.Max(maxAlpha, math.Abs(y[1]))
			}
		}
		res, err := Run(context.Background(), Config{Controller: cs, Plant: ps, Steps: 500, Variant: v, Compress: true, Seed: &seed, Trace: &trace, Observe: observe})
		if err != nil {
			t.Fatal(err)
		}
		if observed != 500 {
			t.Fatalf("%v: observed %d ticks, want 500", v, observed)
		}
		if maxAlpha >= 1.5 {
			t.Errorf("%v: max |α| from 3 s on = %.3f°, want < 1.5°", v, maxAlpha)
		}
		if res.MaxDiff > res.Bound || res.MaxDiff == 0 {
			t.Errorf("%v: max |u - uplain| = %g, bound %g", v, res.MaxDiff, res.Bound)
		}
		if res.Resolved.Params.Field.Name() != mpc.PresetM127 {
			t.Errorf("auto picked %s, want %s", res.Resolved.Params.Field.Name(), mpc.PresetM127)
		}
		rows, err := csv.NewReader(&trace).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(rows[0], ","); got != "step,y0,y1,u0,uplain0" {
			t.Errorf("trace header %q", got)
		}
		if len(rows) != 501 {
			t.Errorf("trace has %d rows, want 501", len(rows))
		}
	}
}

// TestSeedReplays: the same seed gives the same trace bit for bit.
func TestSeedReplays(t *testing.T) {
	cs, ps := specs(t)
	seed := uint64(11)
	var a, b bytes.Buffer
	for _, buf := range []*bytes.Buffer{&a, &b} {
		if _, err := Run(context.Background(), Config{Controller: cs, Plant: ps, Steps: 100, Seed: &seed, Trace: buf}); err != nil {
			t.Fatal(err)
		}
	}
	if a.String() != b.String() {
		t.Fatal("two runs with the same seed differ")
	}
}

// TestRunStopsWithItsContext: a run whose context ends stops at the next
// tick, says how far it got, and keeps the ticks that ran in its trace.
func TestRunStopsWithItsContext(t *testing.T) {
	cs, ps := specs(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var trace bytes.Buffer
	ticks := 0
	_, err := Run(ctx, Config{Controller: cs, Plant: ps, Steps: 1000000, Trace: &trace,
		Observe: func(tick int, _, _, _ []float64) {
			if ticks++; tick == 41 {
				cancel()
			}
		}})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "after 42 of 1000000 ticks") {
		t.Fatalf("err = %v, want an interruption after 42 ticks", err)
	}
	if ticks != 42 {
		t.Errorf("%d ticks ran, want 42", ticks)
	}
	rows, err := csv.NewReader(&trace).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 43 {
		t.Errorf("trace has %d rows, want a header and 42 ticks", len(rows))
	}
}

func TestErrors(t *testing.T) {
	cs, ps := specs(t)
	if _, err := Run(context.Background(), Config{Controller: cs, Plant: ps, Steps: 0}); err == nil {
		t.Error("zero steps accepted")
	}
	// A plant whose outputs do not match the controller's p.
	lti := plant.Spec{Kind: plant.KindLTI, A: [][]float64{{0.5}}, B: [][]float64{{1}}, C: [][]float64{{1}}}
	if _, err := Run(context.Background(), Config{Controller: cs, Plant: lti, Steps: 10}); err == nil || !strings.Contains(err.Error(), "outputs") {
		t.Errorf("mismatched plant: %v", err)
	}
	// A measurement outside Q<k,l> is an error naming the value and the bound.
	big := plant.Spec{Kind: plant.KindLTI, A: [][]float64{{1}}, B: [][]float64{{0}}, C: [][]float64{{1}, {1}}, X0: []float64{1000}}
	if _, err := Run(context.Background(), Config{Controller: cs, Plant: big, Steps: 10}); err == nil || !strings.Contains(err.Error(), "1000") || !strings.Contains(err.Error(), "Q<18,9>") {
		t.Errorf("out-of-range measurement: %v", err)
	}
	// An unstable A with "auto" is refused, with a hint.
	unstable := cs
	unstable.A = [][]float64{{0, 0, 0}, {0, 0, 0}, {0, 0, 1.25}}
	if _, err := Run(context.Background(), Config{Controller: unstable, Plant: ps, Steps: 10}); err == nil || !strings.Contains(err.Error(), "explicit") {
		t.Errorf("unstable A with auto: %v", err)
	}
	// An explicit modulus with an unstable A runs with a warning.
	unstable.Modulus = mpc.PresetP25519
	res, err := Run(context.Background(), Config{Controller: unstable, Plant: ps, Steps: 10})
	if err != nil {
		t.Fatalf("unstable A with an explicit modulus: %v", err)
	}
	if len(res.Resolved.Warnings) == 0 {
		t.Error("no warning for an unstable A with an explicit modulus")
	}
	// Too few bits.
	small := cs
	small.Modulus = "18446744073709551557" // an odd 64-bit number
	if _, err := Run(context.Background(), Config{Controller: small, Plant: ps, Steps: 10}); err == nil || !strings.Contains(err.Error(), "need 93 bits") {
		t.Errorf("64-bit modulus: %v", err)
	}
}

// TestLoadSpecsBuiltin: outside the repository the default paths are read
// from the copy built into duet, and say so; the same specs as the files;
// any other missing path is an error naming it.
func TestLoadSpecsBuiltin(t *testing.T) {
	wantC, wantP := specs(t)
	t.Chdir(t.TempDir())
	cs, ps, builtin, err := LoadSpecs(examples.QubeController, examples.QubePlant)
	if err != nil {
		t.Fatal(err)
	}
	if len(builtin) != 2 || builtin[0] != examples.QubeController || builtin[1] != examples.QubePlant {
		t.Errorf("builtin %q, want both default paths", builtin)
	}
	if !reflect.DeepEqual(cs, wantC) || !reflect.DeepEqual(ps, wantP) {
		t.Error("the built-in specs differ from the repository's files")
	}
	if _, _, builtin, err := LoadSpecs("mine.json", examples.QubePlant); err == nil || !strings.Contains(err.Error(), "mine.json") || len(builtin) != 0 {
		t.Errorf("a missing controller file of the user's: err %v, builtin %q; want an error naming mine.json and no built-in copy", err, builtin)
	}
	if _, _, _, err := LoadSpecs(examples.QubeController, "plant-of-mine.json"); err == nil || !strings.Contains(err.Error(), "plant-of-mine.json") {
		t.Errorf("a missing plant file of the user's: err %v, want one naming plant-of-mine.json", err)
	}
}

// TestLoadSpecsPrefersFiles: where the default paths exist (the repository's
// root) they are read, not the built-in copy.
func TestLoadSpecsPrefersFiles(t *testing.T) {
	t.Chdir("../..")
	if _, _, builtin, err := LoadSpecs(examples.QubeController, examples.QubePlant); err != nil || len(builtin) != 0 {
		t.Errorf("at the repository's root: builtin %q, err %v; want the files read", builtin, err)
	}
}

// TestTraceKeptWhenATickFails: a tick that fails (here a measurement out of
// the fixed-point range: a plant that diverges) ends the run with the trace
// written up to it; the rows before the failure are the ones that show why.
// Before, the trace was flushed only at a run's end, and the buffered rows
// were lost.
func TestTraceKeptWhenATickFails(t *testing.T) {
	cs, _ := specs(t)
	// y doubles each tick and leaves Q<18,9> ([-256, 256)) at tick 8.
	ps := plant.Spec{Kind: plant.KindLTI, A: [][]float64{{2}}, B: [][]float64{{0}}, C: [][]float64{{1}, {1}}, X0: []float64{1}}
	seed := uint64(1)
	var trace bytes.Buffer
	_, err := Run(context.Background(), Config{Controller: cs, Plant: ps, Steps: 20, Variant: mpc.PerTick, Seed: &seed, Trace: &trace})
	if err == nil || !strings.Contains(err.Error(), "tick 8:") {
		t.Fatalf("Run: %v, want tick 8 to fail", err)
	}
	rows, err := csv.NewReader(&trace).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 9 || rows[8][0] != "7" {
		t.Fatalf("the trace has %d rows (%v), want the header and ticks 0 to 7", len(rows), rows)
	}
}
