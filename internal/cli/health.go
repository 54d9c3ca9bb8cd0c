package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

func init() {
	register("health", "probe a service's /healthz or /readyz (container health checks: images have no curl)", runHealth)
}

// runHealth GETs one URL and succeeds on 200 OK only. The service images are
// FROM scratch, so Docker's HEALTHCHECK and compose's healthcheck run
// `/duet health http://127.0.0.1:9100/readyz` instead of curl.
func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("health", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	quiet := fs.Bool("q", false, "print nothing on success")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: duet health [--timeout 2s] [-q] URL\n\nExits 0 if GET URL answers 200 OK, 1 otherwise.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", ErrUsage, err)
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return fmt.Errorf("%w: health takes exactly one URL", ErrUsage)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout %v: want more than 0", ErrUsage, *timeout)
	}
	url := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	// The URL itself must answer 200: a redirect is not followed (a
	// redirect to some page that answers 200 would pass a dead service).
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s: %s", url, resp.Status)
	}
	if !*quiet {
		fmt.Fprintf(stdout, "%s: %s\n", url, resp.Status)
	}
	return nil
}
