// Package cli implements the duet command's subcommands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/duet-mpc/duet/internal/sim"
	"github.com/duet-mpc/duet/pkg/mpc"
	"github.com/duet-mpc/duet/pkg/plant"
)

type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error) {
	commands[name] = command{summary, run}
}

// ErrUsage marks a command-line mistake.
var ErrUsage = errors.New("usage")

// Run dispatches to a subcommand.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return fmt.Errorf("%w: no subcommand", ErrUsage)
		}
		return nil
	}
	c, ok := commands[args[0]]
	if !ok {
		usage(stderr)
		return fmt.Errorf("%w: unknown subcommand %q", ErrUsage, args[0])
	}
	err := c.run(ctx, args[1:], stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil // -h printed the flags
	}
	return err
}

func usage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("duet: secure two-party controller computation\n\nusage: duet <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-8s %s\n", n, commands[n].summary)
	}
	b.WriteString("\nRun 'duet <command> -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}

// parseFlags parses a subcommand's flags and refuses positional arguments.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	return nil
}

// loadLoop reads a controller and a plant spec and the Protocol 1 variant;
// it says on stderr which default spec it read from the copy built into
// duet (sim.LoadSpecs). It resolves the controller (sizes the modulus and
// rounds it onto the Q<k,l> grid) and checks the plant's dimensions against
// it, so that each such error names its file; the largest rounding, if any,
// goes to stderr.
func loadLoop(ctrlPath, plantPath, mask string, stderr io.Writer) (mpc.ControllerSpec, plant.Spec, mpc.Resolved, error) {
	var rz mpc.Resolved
	v, err := mpc.ParseVariant(mask)
	if err != nil {
		return mpc.ControllerSpec{}, plant.Spec{}, rz, fmt.Errorf("%w: --mask: %w", ErrUsage, err)
	}
	cs, ps, builtin, err := sim.LoadSpecs(ctrlPath, plantPath)
	for _, p := range builtin {
		fmt.Fprintf(stderr, "duet: no %s here: using the copy built into duet\n", p)
	}
	if err != nil {
		return cs, ps, rz, err
	}
	if rz, err = cs.Resolve(v); err != nil {
		return cs, ps, rz, fmt.Errorf("%s: %w", ctrlPath, err)
	}
	pl, err := plant.New(ps)
	if err != nil {
		return cs, ps, rz, fmt.Errorf("%s: %w", plantPath, err)
	}
	if prm := rz.Params; pl.Outputs() != prm.P || pl.Inputs() != prm.M {
		return cs, ps, rz, fmt.Errorf("the plant %s has %d outputs and %d inputs, the controller %s expects p=%d and m=%d",
			plantPath, pl.Outputs(), pl.Inputs(), ctrlPath, prm.P, prm.M)
	}
	if rz.QuantErr > 0 {
		fmt.Fprintf(stderr, "duet: %s: entries rounded onto the Q<%d,%d> grid, the largest by %.3g\n", ctrlPath, cs.K, cs.L, rz.QuantErr)
	}
	return cs, ps, rz, nil
}
