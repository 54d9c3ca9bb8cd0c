// Command duet is the product's command-line entry point: sim, demo, bench
// and keys. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/duet-mpc/duet/internal/bench"
	"github.com/duet-mpc/duet/internal/cli"
	"github.com/duet-mpc/duet/internal/service"
)

func main() {
	service.TuneGC()
	if bench.RelayMain() { // a process duet bench started as a floor relay
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal asks the command to stop (a demo still writes its
	// summary and outputs); once it has, the signals are let go, so that a
	// second Ctrl-C ends a shutdown that takes too long.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "duet:", err)
		os.Exit(1)
	}
}
