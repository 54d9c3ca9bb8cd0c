// Package sim runs the two-party controller in one process against a
// simulated plant, next to the float64 plaintext controller: `duet sim`.
package sim

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/internal/trace"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

// Config is one simulation.
type Config struct {
	Controller mpc.ControllerSpec
	Plant      plant.Spec
	Steps      int
	Variant    mpc.Variant
	Compress   bool      // seed-compressed dealer material
	Seed       *uint64   // nil: fresh randomness from crypto/rand
	Trace      io.Writer // optional CSV trace
	// Resolved, if set, is Controller already resolved (by a caller that
	// checked it first), and its Params.Variant is the one run: Variant is
	// then not used. nil: Run resolves Controller with Variant.
	Resolved *mpc.Resolved
	// Observe, if set, is called for every tick with its measurement y, the
	// secure input u and the plaintext controller's uplain, before the plant
	// advances with u: it must neither keep nor modify them. The run keeps
	// no per-tick data itself, so its memory does not grow with Steps.
	Observe func(tick int, y, u, uplain []float64)
}

// Result summarises a run.
type Result struct {
	Resolved mpc.Resolved
	// MaxDiff is max over ticks and inputs of |u - uplain|.
	MaxDiff float64
	// Bound is the a-priori bound on |u - uplain| (see OutputBound).
	Bound float64
}

// RandSource returns the randomness for a run: a seeded AES-CTR stream for
// reproducible runs, else a stream keyed from crypto/rand.
func RandSource(seed *uint64) (io.Reader, error) {
	var key [32]byte
	if seed != nil {
		binary.LittleEndian.PutUint64(key[:], *seed)
		copy(key[8:], "duet sim seed")
	} else if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	return mpc.NewPRG(key, [16]byte{}), nil
}

// Run simulates cfg.Steps ticks, or fewer if ctx ends first (an error
// wrapping ctx's, with the result of the ticks that ran).
func Run(ctx context.Context, cfg Config) (res Result, rerr error) {
	if cfg.Steps < 1 {
		return res, fmt.Errorf("sim: steps must be positive, got %d", cfg.Steps)
	}
	var rz mpc.Resolved
	if cfg.Resolved != nil {
		rz = *cfg.Resolved
	} else {
		var err error
		if rz, err = cfg.Controller.Resolve(cfg.Variant); err != nil {
			return res, err
		}
	}
	res.Resolved = rz
	prm := rz.Params
	pl, err := plant.New(cfg.Plant)
	if err != nil {
		return res, err
	}
	if pl.Outputs() != prm.P || pl.Inputs() != prm.M {
		return res, fmt.Errorf("sim: plant has %d outputs and %d inputs, controller expects p=%d and m=%d",
			pl.Outputs(), pl.Inputs(), prm.P, prm.M)
	}
	rng, err := RandSource(cfg.Seed)
	if err != nil {
		return res, err
	}
	var secret [32]byte
	if _, err := io.ReadFull(rng, secret[:]); err != nil {
		return res, err
	}
	loop, err := mpc.NewLocalLoop(prm, rz.Phi, rz.X0, rng, mpc.NewSession(secret), cfg.Compress)
	if err != nil {
		return res, err
	}
	fc := cfg.Controller.NewFloatController()
	var tw *trace.Writer
	if cfg.Trace != nil {
		if tw, err = trace.NewWriter(cfg.Trace, prm.P, prm.M); err != nil {
			return res, err
		}
		// Flushed however the run ends: the last rows before a failed
		// tick are the ones that show why it failed.
		defer func() {
			if err := tw.Flush(); err != nil && rerr == nil {
				rerr = err
			}
		}()
	}
	res.Bound = OutputBound(cfg.Controller, rz)
	var stopped error // ctx ended: the trace keeps the ticks that ran
	for t := 0; t < cfg.Steps; t++ {
		if err := ctx.Err(); err != nil {
			stopped = fmt.Errorf("sim: interrupted after %d of %d ticks: %w", t, cfg.Steps, err)
			break
		}
		y := pl.Measure()
		u, err := loop.Step(y)
		if err != nil {
			return res, fmt.Errorf("sim: tick %d: %w", t, err)
		}
		up := fc.Step(y)
		for i := range u {
			res.MaxDiff = math.Max(res.MaxDiff, math.Abs(u[i]-up[i]))
		}
		if tw != nil {
			if err := tw.Row(t, y, u, up); err != nil {
				return res, err
			}
		}
		if cfg.Observe != nil {
			cfg.Observe(t, y, u, up)
		}
		pl.Step(u)
	}
	return res, stopped
}

// OutputBound bounds |u_t - uplain_t| for all t when both controllers see
// the same y. The secure controller differs from the float one by (a) the
// rounding of y onto the Q<k,l> grid, at most 2^-(l+1) per entry, (b) each
// truncation, round(X/2^l) + W, which adds at most 1.5 2^-l per state entry
// and tick, and (c) the rounding of Φ onto the grid (QuantErr). Errors enter
// the state and decay through A, so with S = Σ_t ||A^t||_inf:
//
//	|Δx| <= S (1.5 2^-l + ||B|| e_y + e_Φ (x_max + y_max))
//	|Δu| <= ||C|| |Δx| + ||D|| e_y + e_Φ (x_max + y_max)
//
// with x_max, y_max the largest state and measurement magnitudes allowed by
// Q<k,l>. The e_Φ term is zero for controllers that are exact on the grid.
func OutputBound(s mpc.ControllerSpec, rz mpc.Resolved) float64 {
	l := float64(s.L)
	ey := math.Exp2(-l - 1)
	eTrunc := 1.5 * math.Exp2(-l)
	eq := 0.0
	if rz.QuantErr > 0 {
		n, _, p := s.Dims()
		lim := math.Exp2(float64(s.K - 1 - s.L))
		eq = rz.QuantErr * float64(n+p) * lim
	}
	S := rz.Sizing.SeriesSum
	dx := S * (eTrunc + normInf(s.B)*ey + eq)
	return normInf(s.C)*dx + normInf(s.D)*ey + eq + math.Exp2(-2*l)
}

func normInf(m [][]float64) float64 {
	best := 0.0
	for _, row := range m {
		s := 0.0
		for _, v := range row {
			s += math.Abs(v)
		}
		best = math.Max(best, s)
	}
	return best
}

// LoadSpecs reads a controller file and a plant file. A default path
// (examples.QubeController, examples.QubePlant) with no such file, as when
// duet runs outside the repository, is read from the copy built into duet
// (examples.Fallback); builtin lists the paths read so, for the caller to
// say so.
func LoadSpecs(controllerPath, plantPath string) (cs mpc.ControllerSpec, ps plant.Spec, builtin []string, err error) {
	cs, err = mpc.LoadControllerSpec(controllerPath)
	if data, ok := examples.Fallback(controllerPath, err); ok {
		builtin = append(builtin, controllerPath)
		if cs, err = mpc.ParseControllerSpec(data); err != nil {
			err = fmt.Errorf("built-in %s: %w", controllerPath, err)
		}
	}
	if err != nil {
		return cs, plant.Spec{}, builtin, err
	}
	ps, err = plant.LoadSpec(plantPath)
	if data, ok := examples.Fallback(plantPath, err); ok {
		builtin = append(builtin, plantPath)
		if ps, err = plant.ParseSpec(data); err != nil {
			err = fmt.Errorf("built-in %s: %w", plantPath, err)
		}
	}
	return cs, ps, builtin, err
}
