package service

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/pkg/codec"
)

// runPlant runs a service of the plant's role with the environment as set,
// and reports whether its run function was reached.
func runPlant(t *testing.T) (ran bool, err error) {
	t.Helper()
	var cfg struct{ config.Common }
	err = Run(context.Background(), "test", func() codec.Role { return codec.RolePlant }, &cfg, &cfg.Common, nil,
		func(context.Context, *Env) error { ran = true; return nil })
	return ran, err
}

// A DUET_HTTP_ADDR that cannot be bound stops the service with an error
// naming it, before anything else starts; it used to be logged by the HTTP
// goroutine while the service ran without /metrics and /readyz.
func TestBadHTTPAddrStopsTheService(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, addr := range []string{busy.Addr().String(), "127.0.0.1:notaport", "127.0.0.1:99999"} {
		t.Setenv("DUET_HTTP_ADDR", addr)
		t.Setenv("DUET_KEYS_DIR", t.TempDir()) // no keys: reached, they would fail next
		ran, err := runPlant(t)
		if ran || err == nil {
			t.Fatalf("DUET_HTTP_ADDR=%s: ran %v, err %v; want an error before the run", addr, ran, err)
		}
		if msg := err.Error(); !strings.Contains(msg, "DUET_HTTP_ADDR") || !strings.Contains(msg, addr) {
			t.Errorf("DUET_HTTP_ADDR=%s: error %q does not name the variable and its value", addr, msg)
		}
	}
}

// A service that stops on a later error (here: no keys) releases the
// address it bound.
func TestHTTPAddrReleasedOnError(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	t.Setenv("DUET_HTTP_ADDR", addr)
	t.Setenv("DUET_KEYS_DIR", t.TempDir())
	ran, err := runPlant(t)
	if ran || err == nil || strings.Contains(err.Error(), "DUET_HTTP_ADDR") {
		t.Fatalf("ran %v, err %v; want the keys' error", ran, err)
	}
	again, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the address is still bound after the service stopped: %v", err)
	}
	again.Close()
}
