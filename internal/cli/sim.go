package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/duet-mpc/duet/examples"
	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/mpc"
)

func init() {
	register("sim", "run P0 and P1 in-process on a simulated plant, beside the plaintext controller", runSim)
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ctrl := fs.String("controller", examples.QubeController, "controller spec (JSON); the default is read from the copy built into duet when this directory has none")
	plantPath := fs.String("plant", examples.QubePlant, "plant spec (JSON); the default is read from the copy built into duet when this directory has none")
	steps := fs.Int("steps", 250, "number of ticks")
	tracePath := fs.String("trace", "", "write the trace CSV here (step,y..,u..,uplain..)")
	seed := fs.Int64("seed", -1, "seed for reproducible randomness (negative: crypto/rand)")
	mask := fs.String("mask", "per-tick", "Protocol 1 variant: per-tick (the paper's) or fixed")
	compress := fs.Bool("compress", true, "seed-compress dealer material")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *steps < 1 {
		return fmt.Errorf("%w: --steps %d: want at least 1", ErrUsage, *steps)
	}
	// Everything that can be refused is checked before the trace file is
	// created: a failed run must not empty an existing one.
	cs, ps, rz, err := loadLoop(*ctrl, *plantPath, *mask, stderr)
	if err != nil {
		return err
	}
	cfg := sim.Config{Controller: cs, Plant: ps, Steps: *steps, Variant: rz.Params.Variant, Compress: *compress, Resolved: &rz}
	if *seed >= 0 {
		s := uint64(*seed)
		cfg.Seed = &s
	}
	if *tracePath != "" {
		f, err := os.Create(*tracePath)
		if err != nil {
			return err
		}
		defer f.Close()
		cfg.Trace = f
	}
	res, err := sim.Run(ctx, cfg)
	for _, w := range res.Resolved.Warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		return err
	}
	prm := res.Resolved.Params
	sz := res.Resolved.Sizing
	fmt.Fprintf(stdout, "modulus        %s (%d bits, log2 q = %.2f), mask %s\n", prm.Field.Name(), prm.Field.BitLen(), prm.Field.Log2(), prm.Variant)
	fmt.Fprintf(stdout, "bits required  %d (Theorem 1: %d, numeric state bound: %d; c = %.4f, γ = %.4f, ρ(A) = %.4f)\n",
		sz.RequiredBits, sz.TheoremBits, sz.NumericBits, sz.C, sz.Gamma, sz.Rho)
	fmt.Fprintf(stdout, "dimensions     n=%d m=%d p=%d, Q<%d,%d>, λ=%d, κ=%d\n", prm.N, prm.M, prm.P, prm.K, prm.L, prm.Lambda, prm.Kappa())
	fmt.Fprintf(stdout, "dealer bytes   %d per tick (%d without seed compression)\n",
		mpc.DealerBytesPerTick(prm, true), mpc.DealerBytesPerTick(prm, false))
	fmt.Fprintf(stdout, "ticks          %d\n", *steps)
	fmt.Fprintf(stdout, "max |u-uplain| %.6g (bound %.6g)\n", res.MaxDiff, res.Bound)
	if *tracePath != "" {
		if err := cfgTraceClose(cfg); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "trace          %s\n", *tracePath)
	}
	if res.MaxDiff > res.Bound {
		return fmt.Errorf("sim: max |u - uplain| = %g exceeds the bound %g", res.MaxDiff, res.Bound)
	}
	return nil
}

func cfgTraceClose(cfg sim.Config) error {
	if c, ok := cfg.Trace.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
