package config_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/sensor"
)

func TestHelpListsEveryVariable(t *testing.T) {
	var cfg party.Config
	var out bytes.Buffer
	if err := config.Load(&cfg, []string{"-h"}, &out); !errors.Is(err, config.ErrHelp) {
		t.Fatalf("Load(-h) = %v, want ErrHelp", err)
	}
	for _, k := range config.Keys(&cfg) {
		if !strings.Contains(out.String(), k) {
			t.Errorf("-h output lacks %s", k)
		}
	}
	if !strings.Contains(out.String(), "(required)") || !strings.Contains(out.String(), "nats://127.0.0.1:4222") {
		t.Errorf("-h output lacks defaults or the required marker:\n%s", out.String())
	}
}

// The party's write coalescing defaults to the value the bench and the demo
// give their parties, and reaches its NATS connection.
func TestPartyWriteCoalesceDefault(t *testing.T) {
	t.Setenv("DUET_PARTY", "0")
	var cfg party.Config
	if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.WriteCoalesce != party.DefaultWriteCoalesce {
		t.Fatalf("DUET_WRITE_COALESCE defaults to %v, want party.DefaultWriteCoalesce (%v)", cfg.WriteCoalesce, party.DefaultWriteCoalesce)
	}
	if len(cfg.NATSOptions()) != 1 {
		t.Fatalf("the party's NATS options: %d, want the write coalescing", len(cfg.NATSOptions()))
	}
}

func TestUnknownVariableStops(t *testing.T) {
	t.Setenv("DUET_PARTY", "0")
	t.Setenv("DUET_PARTTY", "1")
	var cfg party.Config
	err := config.Load(&cfg, nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DUET_PARTTY") {
		t.Fatalf("Load with a misspelt variable = %v, want an error naming DUET_PARTTY", err)
	}
}

func TestInvalidValuesStop(t *testing.T) {
	cases := []struct {
		cfg  any
		env  map[string]string
		want string
	}{
		{&party.Config{}, map[string]string{"DUET_PARTY": "2"}, "DUET_PARTY=2"},
		{&party.Config{}, map[string]string{}, "DUET_PARTY is required and not set: which party this is: 0 or 1"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "x"}, "PARTY"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_PERSIST_DELAY": "-1ms"}, "DUET_PERSIST_DELAY=-1ms"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_PERSIST_DELAY": "2s"}, "DUET_PERSIST_DELAY=2s"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_PEER_BATCH": "0"}, "DUET_PEER_BATCH=0"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_WRITE_COALESCE": "-1us"}, "DUET_WRITE_COALESCE=-1µs"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "1", "DUET_WRITE_COALESCE": "11ms"}, "DUET_WRITE_COALESCE=11ms"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "1", "DUET_PEER_BATCH": "257"}, "DUET_PEER_BATCH=257"},
		{&actuator.Config{}, map[string]string{"DUET_FAILSAFE": "panic"}, "DUET_FAILSAFE"},
		{&actuator.Config{}, map[string]string{"DUET_DEADLINE": "-1s"}, "DUET_DEADLINE"},
		{&sensor.Config{}, map[string]string{"DUET_MASK": "sometimes"}, "DUET_MASK"},
		{&sensor.Config{}, map[string]string{"DUET_LOOP": "a.b"}, "DUET_LOOP"},
		{&sensor.Config{}, map[string]string{"DUET_PERIOD": "fast"}, "PERIOD"},
		{&sensor.Config{}, map[string]string{"DUET_ITEMS_PER_MSG": "0"}, "DUET_ITEMS_PER_MSG=0"},
		{&sensor.Config{}, map[string]string{"DUET_ITEMS_PER_MSG": "129"}, "DUET_ITEMS_PER_MSG=129"},
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "soon"}, `DUET_NOTICE_DELAY="soon"`},
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "-1ms"}, "DUET_NOTICE_DELAY=-1ms"},
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "40ms"}, "DUET_NOTICE_DELAY=40ms"},
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "3ms", "DUET_PERIOD": "2ms"}, "DUET_NOTICE_DELAY=3ms"},
		{&sensor.Config{}, map[string]string{"DUET_PLANT_WAIT": "0s"}, "DUET_PLANT_WAIT=0s: want 1ms..1m"},
		{&sensor.Config{}, map[string]string{"DUET_PLANT_WAIT": "2m"}, "DUET_PLANT_WAIT=2m0s: want 1ms..1m"},
		{&dealer.Config{}, map[string]string{"DUET_POLL": "0s"}, "DUET_POLL=0s"},
		{&dealer.Config{}, map[string]string{"DUET_POLL_MAX": "10ms"}, "DUET_POLL_MAX=10ms: want >= DUET_POLL (50ms)"},
		{&dealer.Config{}, map[string]string{"DUET_POLL": "2s"}, "DUET_POLL_MAX=1s: want >= DUET_POLL (2s)"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			err := config.Load(c.cfg, nil, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("env %v: Load = %v, want an error mentioning %s", c.env, err, c.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var cfg actuator.Config
	if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.Deadline != 30*time.Millisecond || cfg.FailSafe != "zero" || cfg.NATSURL != "nats://127.0.0.1:4222" {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// DUET_NOTICE_DELAY reaches the sensor's Options.NoticeDelay: auto (the
// default) as 0, which the sensor resolves; 0 as at once; a duration as
// itself.
func TestSensorNoticeDelay(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{
		{"", 0},
		{"auto", 0},
		{"0", -1},
		{"0s", -1},
		{"7ms", 7 * time.Millisecond},
	} {
		if c.env != "" {
			t.Setenv("DUET_NOTICE_DELAY", c.env)
		}
		var cfg sensor.Config
		if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil {
			t.Fatalf("DUET_NOTICE_DELAY=%q: %v", c.env, err)
		}
		if got := cfg.NoticeDelayOption(); got != c.want {
			t.Errorf("DUET_NOTICE_DELAY=%q: Options.NoticeDelay %v, want %v", c.env, got, c.want)
		}
	}
}

// Only DUET_ variables configure a service: envconfig's fallback to the
// name without the prefix (DEADLINE for DUET_DEADLINE) is not taken, and the
// environment is left as it was.
func TestBareVariablesIgnored(t *testing.T) {
	t.Setenv("DEADLINE", "5s")
	t.Setenv("FAILSAFE", "bogus")
	t.Setenv("NATS_URL", "nats://elsewhere:4222")
	var cfg actuator.Config
	if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if cfg.Deadline != 30*time.Millisecond || cfg.FailSafe != "zero" || cfg.NATSURL != "nats://127.0.0.1:4222" {
		t.Fatalf("bare variables read: %+v", cfg)
	}
	if v := os.Getenv("DEADLINE"); v != "5s" {
		t.Fatalf("DEADLINE is %q after Load, want 5s", v)
	}
	t.Setenv("DUET_DEADLINE", "40ms")
	if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil || cfg.Deadline != 40*time.Millisecond {
		t.Fatalf("DUET_DEADLINE=40ms: %v, %v", cfg.Deadline, err)
	}
}

// DUET_PLANT_WAIT, the sensor's plant read timeout (cmd/sensor passes it
// as Options.PlantWait), defaults to the 1 s the sensor used before it
// could be set.
func TestSensorPlantWait(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{{"", time.Second}, {"40ms", 40 * time.Millisecond}} {
		if c.env != "" {
			t.Setenv("DUET_PLANT_WAIT", c.env)
		}
		var cfg sensor.Config
		if err := config.Load(&cfg, nil, &bytes.Buffer{}); err != nil {
			t.Fatalf("DUET_PLANT_WAIT=%q: %v", c.env, err)
		}
		if cfg.PlantWait != c.want {
			t.Errorf("DUET_PLANT_WAIT=%q: %v, want %v", c.env, cfg.PlantWait, c.want)
		}
	}
}
