package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/duet-mpc/duet/internal/keys"
)

func init() {
	register("keys", "generate every role's end-to-end key pair into a directory", runKeys)
}

func runKeys(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "keys", "output directory: <role>.seed (0600, secret) and <role>.pub per role")
	force := fs.Bool("force", false, "overwrite existing key files (rotates every key)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if err := keys.Generate(*dir, *force); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote one key pair per role into %s; give each service only its own .seed and every .pub\n", *dir)
	return nil
}
