package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.Write([]byte("ready\n"))
		case "/slow":
			time.Sleep(time.Second)
		case "/moved":
			http.Redirect(w, r, "/readyz", http.StatusFound)
		default:
			http.Error(w, "not ready", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	var out strings.Builder
	if err := Run(ctx, []string{"health", srv.URL + "/readyz"}, &out, io.Discard); err != nil {
		t.Fatalf("health on 200: %v", err)
	}
	if !strings.Contains(out.String(), "200 OK") {
		t.Errorf("health printed %q, want the status", out.String())
	}
	out.Reset()
	if err := Run(ctx, []string{"health", "-q", srv.URL + "/readyz"}, &out, io.Discard); err != nil || out.Len() != 0 {
		t.Errorf("health -q: err %v, printed %q; want nil and nothing", err, out.String())
	}
	if err := Run(ctx, []string{"health", srv.URL + "/other"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("health on 503: %v, want an error naming the status", err)
	}
	// A redirect is not followed: the URL itself must answer 200 (before,
	// a redirect to a page that answers 200 passed).
	if err := Run(ctx, []string{"health", srv.URL + "/moved"}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "302") {
		t.Errorf("health on a redirect: %v, want an error naming the 302", err)
	}
	if err := Run(ctx, []string{"health", "--timeout", "50ms", srv.URL + "/slow"}, io.Discard, io.Discard); err == nil {
		t.Errorf("health past its timeout succeeded")
	}
	if err := Run(ctx, []string{"health", "http://127.0.0.1:1/readyz"}, io.Discard, io.Discard); err == nil {
		t.Errorf("health with nothing listening succeeded")
	}
	for _, args := range [][]string{{"health"}, {"health", "a", "b"}, {"health", "--bogus", "x"}} {
		if err := Run(ctx, args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("Run(%q) = %v, want ErrUsage", args, err)
		}
	}
	// A timeout of 0 or less failed as "context deadline exceeded".
	for _, d := range []string{"0s", "-1s"} {
		if err := Run(ctx, []string{"health", "--timeout", d, srv.URL + "/readyz"}, io.Discard, io.Discard); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--timeout "+d) {
			t.Errorf("health --timeout %s: %v, want a usage error naming the flag", d, err)
		}
	}
}

// Bad bench flags are usage errors, refused before anything runs.
func TestBenchUsage(t *testing.T) {
	ctx := context.Background()
	out := t.TempDir()
	notExec := filepath.Join(out, "party")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"bench"}, // no --out
		{"bench", "--out", out, "--peer-batch", "-1"},
		{"bench", "--out", out, "--peer-batch", "257"},
		{"bench", "--out", out, "--prefetch", "-1"},
		{"bench", "--out", out, "--prefetch", "100001"},
		{"bench", "--out", out, "--items-per-msg", "-1"},
		{"bench", "--out", out, "--items-per-msg", "129"},
		{"bench", "--out", out, "--loops", "0"},
		{"bench", "--out", out, "--loops", "100,5001"},
		{"bench", "--out", out, "--only", "tick, tick"},
		{"bench", "--out", out, "--only", "tick", "--loops", "100"},
		{"bench", "--out", out, "--only", "fig5,dealer", "--two-hop"},
		{"bench", "--out", out, "--write-coalesce", "-1ms"},
		{"bench", "--out", out, "--write-coalesce", "11ms"},
		{"bench", "--out", out, "--write-coalesce", "soon"},
		{"bench", "--out", out, "--mask", "sometimes"},
		{"bench", "--out", out, "--repeat", "-1"},
		{"bench", "--out", out, "--repeat", "21"},
		{"bench", "--out", out, "--step-duration", "500ms"},
		{"bench", "--out", out, "--step-duration", "11m"},
		{"bench", "--out", out, "--step-duration", "long"},
		{"bench", "--out", out, "--live-dealers", "10ms"},
		{"bench", "--out", out, "--live-dealers", "2m"},
		{"bench", "--out", out, "--live-dealers", "-1s"},
		{"bench", "--out", out, "--live-dealers", "often"},
		{"bench", "--out", out, "--party-bin", filepath.Join(out, "missing")},
		{"bench", "--out", out, "--party-bin", notExec},
		{"bench", "--out", out, "--party-bin", out}, // a directory
		{"bench", "--out", out, "extra"},
	} {
		if err := Run(ctx, args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) {
			t.Errorf("Run(%q) = %v, want ErrUsage", args, err)
		}
	}
	// The parties' flags with --only leaving out both sections that run
	// them, and a section name that does not exist, are refused by name
	// (the context is cancelled: a case not refused returns at once).
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--out", out, "--only", "fig5,dealer", "--prefetch", "8"}, "--prefetch only affect the tick and scale sections"},
		{[]string{"bench", "--out", out, "--only", "fig5", "--state-file-store", "--peer-batch", "4"}, "--peer-batch, --state-file-store only affect"},
		{[]string{"bench", "--out", out, "--only", "fig5,scal", "--loops", "200"}, `unknown section "scal"`},
		{[]string{"bench", "--out", out, "--only", "tick", "--prefetch", "8"}, ""}, // tick runs the parties: accepted
	} {
		err := Run(cctx, c.args, io.Discard, io.Discard)
		if c.want == "" {
			if errors.Is(err, ErrUsage) {
				t.Errorf("Run(%q) = %v, want it accepted", c.args, err)
			}
		} else if !errors.Is(err, ErrUsage) || !strings.Contains(fmt.Sprint(err), c.want) {
			t.Errorf("Run(%q) = %v, want ErrUsage saying %q", c.args, err, c.want)
		}
	}
	// In-process connections need the embedded server and the parties in
	// the bench's process: refused, by name, with an external server or
	// with party processes (this test's own binary is an executable).
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"bench", "--out", out, "--in-process", "--nats", "nats://127.0.0.1:1"},
		{"bench", "--out", out, "--in-process", "--party-bin", self},
	} {
		if err := Run(ctx, args, io.Discard, io.Discard); !errors.Is(err, ErrUsage) || !strings.Contains(fmt.Sprint(err), "--in-process") {
			t.Errorf("Run(%q) = %v, want ErrUsage naming --in-process", args, err)
		}
	}
}
