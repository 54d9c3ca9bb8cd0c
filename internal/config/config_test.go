package config_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
	"github.com/duet-mpc/duet/pkg/codec"
)

func TestHelpListsEveryVariable(t *testing.T) {
	clearEnv(t)
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
	clearEnv(t)
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
	clearEnv(t)
	t.Setenv("DUET_PARTY", "0")
	t.Setenv("DUET_PARTTY", "1")
	var cfg party.Config
	err := config.Load(&cfg, nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "DUET_PARTTY") {
		t.Fatalf("Load with a misspelt variable = %v, want an error naming DUET_PARTTY", err)
	}
}

func TestInvalidValuesStop(t *testing.T) {
	clearEnv(t)
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
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_PERSIST_DELAY": "1ns"}, "DUET_PERSIST_DELAY=1ns: want 0 or 100µs..1s"},
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
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "21ms"}, "want 0 to half of DUET_PERIOD (40ms)"},
		{&sensor.Config{}, map[string]string{"DUET_NOTICE_DELAY": "3ms", "DUET_PERIOD": "2ms"}, "DUET_NOTICE_DELAY=3ms"},
		{&sensor.Config{}, map[string]string{"DUET_PLANT_WAIT": "0s"}, "DUET_PLANT_WAIT=0s: want 1ms..1m"},
		{&sensor.Config{}, map[string]string{"DUET_PLANT_WAIT": "2m"}, "DUET_PLANT_WAIT=2m0s: want 1ms..1m"},
		{&dealer.Config{}, map[string]string{"DUET_POLL": "0s"}, "DUET_POLL=0s"},
		{&dealer.Config{}, map[string]string{"DUET_POLL_MAX": "10ms"}, "DUET_POLL_MAX=10ms: want >= DUET_POLL (50ms)"},
		{&dealer.Config{}, map[string]string{"DUET_POLL": "2s"}, "DUET_POLL_MAX=1s: want >= DUET_POLL (2s)"},
		{&dealer.Config{}, map[string]string{"DUET_POLL_MAX": "2m"}, "DUET_POLL_MAX=2m0s: want >= DUET_POLL (50ms) and <= 1m"},
		{&party.Config{}, map[string]string{"DUET_PARTY": "0", "DUET_ITEM_WAIT": "2s"}, "DUET_ITEM_WAIT=2s: want > 0 and <= 1s"},
		{&plantsvc.Config{}, map[string]string{"DUET_WAIT": "90s"}, "DUET_WAIT=1m30s: want > 0 and <= 1m"},
		{&sensor.Config{}, map[string]string{"DUET_MASK": ""}, `DUET_MASK: mpc: invalid parameters: mask variant ""`},
		{&actuator.Config{}, map[string]string{"DUET_LOG_LEVEL": "info+2"}, `DUET_LOG_LEVEL "info+2": want debug, info, warn or error`},
		{&dealer.Config{}, map[string]string{"DUET_NATS_URL": " "}, "DUET_NATS_URL is empty"},
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
	clearEnv(t)
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
	clearEnv(t)
	id, err := codec.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("DUET_CONTROLLER", "../../examples/qube-servo2/controller.json")
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
		opt, err := cfg.Options(id, nil, nil)
		if err != nil {
			t.Fatalf("DUET_NOTICE_DELAY=%q: %v", c.env, err)
		}
		if got := opt.NoticeDelay; got != c.want {
			t.Errorf("DUET_NOTICE_DELAY=%q: Options.NoticeDelay %v, want %v", c.env, got, c.want)
		}
	}
}

// Only DUET_ variables configure a service: envconfig's fallback to the
// name without the prefix (DEADLINE for DUET_DEADLINE) is not taken, and the
// environment is left as it was.
func TestBareVariablesIgnored(t *testing.T) {
	clearEnv(t)
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

// DUET_PLANT_WAIT, the sensor's plant read timeout (Options.PlantWait,
// TestEveryVariableReachesOptions), defaults to the 1 s the sensor used before it
// could be set.
func TestSensorPlantWait(t *testing.T) {
	clearEnv(t)
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

// Every service's variables reach the service: for each field of its Config
// (but config.Common's, which the service runner reads), a value other than
// the default changes the options the service is built with, or for the
// party's DUET_WRITE_COALESCE its NATS connection's dialer, and reaches the
// option of the same name where there is one. A variable that is read and
// checked but never passed on, or passed on as another, fails here.
func TestEveryVariableReachesOptions(t *testing.T) {
	clearEnv(t)
	id, err := codec.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctlPath, ctlOther := specPair(t, dir, "controller.json", `"lambda": 40`, `"lambda": 41`)
	plantPath, plantOther := specPair(t, dir, "plant.json", `"alpha0_deg":3`, `"alpha0_deg":4`)

	var sc sensor.Config
	load(t, &sc)
	sc.Controller = ctlPath
	everyField(t, &sc, map[string]string{"Loop": "other", "Controller": ctlOther, "Mask": "fixed", "NoticeDelay": "3ms"},
		func() (any, error) { return sc.Options(id, nil, nil) })

	var pc party.Config
	t.Setenv("DUET_PARTY", "0")
	load(t, &pc)
	os.Unsetenv("DUET_PARTY") // the other services refuse it; t.Setenv restores it
	everyField(t, &pc, nil, func() (any, error) {
		opt, err := pc.Options(id, nil, nil)
		var o nats.Options
		for _, f := range pc.NATSOptions() {
			if err := f(&o); err != nil {
				return nil, err
			}
		}
		return struct {
			party.Options
			Dialer nats.CustomDialer
		}{opt, o.CustomDialer}, err
	})

	var ac actuator.Config
	load(t, &ac)
	everyField(t, &ac, map[string]string{"Loop": "other", "FailSafe": "hold"}, func() (any, error) { return ac.Options(nil, nil) })

	var dc dealer.Config
	load(t, &dc)
	everyField(t, &dc, map[string]string{"Name": "other"}, func() (any, error) { return dc.Options(nil, nil) })

	var lc plantsvc.Config
	load(t, &lc)
	lc.Plant = plantPath
	everyField(t, &lc, map[string]string{"Loop": "other", "Plant": plantOther}, func() (any, error) { return lc.Options(nil, nil) })
}

// The party's variables that do not map one to one onto its options.
func TestPartyOptions(t *testing.T) {
	clearEnv(t)
	id, err := codec.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		env     map[string]string
		delay   time.Duration
		key     bool
		storage jetstream.StorageType
	}{
		{nil, 2 * time.Millisecond, true, jetstream.FileStorage},
		{map[string]string{"DUET_PERSIST_DELAY": "0"}, -1, true, jetstream.FileStorage}, // at once
		{map[string]string{"DUET_PERSIST_DELAY": "5ms", "DUET_STATE_FILE_STORE": "false"}, 5 * time.Millisecond, true, jetstream.MemoryStorage},
		{map[string]string{"DUET_PERSIST": "false"}, 2 * time.Millisecond, false, 0},
	} {
		t.Run(fmt.Sprint(c.env), func(t *testing.T) {
			t.Setenv("DUET_PARTY", "1")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var cfg party.Config
			load(t, &cfg)
			opt, err := cfg.Options(id, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if opt.ID != 1 || opt.PersistDelay != c.delay || (opt.StateKey != nil) != c.key || opt.StateStorage != c.storage {
				t.Errorf("ID %d, PersistDelay %v, state key %v, storage %v; want 1, %v, %v, %v",
					opt.ID, opt.PersistDelay, opt.StateKey != nil, opt.StateStorage, c.delay, c.key, c.storage)
			}
		})
	}
	// Options checks what it is given, as the service runner does first.
	cfg := party.Config{Party: 2, Loops: []string{"pendulum"}}
	if _, err := cfg.Options(id, nil, nil); err == nil || !strings.Contains(err.Error(), "DUET_PARTY") {
		t.Errorf("Options with DUET_PARTY=2 = %v, want an error naming DUET_PARTY", err)
	}
}

// clearEnv unsets the DUET_ variables of the environment the test runs in
// for the rest of the test, so that only the defaults and what the test sets
// are loaded.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, config.Prefix+"_") {
			t.Setenv(k, v) // restored after the test
			os.Unsetenv(k)
		}
	}
}

func load(t *testing.T, cfg any) {
	t.Helper()
	if err := config.Load(cfg, nil, &bytes.Buffer{}); err != nil {
		t.Fatalf("%T: %v", cfg, err)
	}
}

// specPair returns the path of the example spec name and of a copy of it in
// dir with old replaced by new.
func specPair(t *testing.T, dir, name, old, new string) (string, string) {
	t.Helper()
	path := "../../examples/qube-servo2/" + name
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(old)) {
		t.Fatalf("%s lacks %s", path, old)
	}
	other := filepath.Join(dir, name)
	if err := os.WriteFile(other, bytes.Replace(b, []byte(old), []byte(new), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, other
}

// everyField changes each field of *cfg but the embedded config.Common in
// turn, from its value to another (strings to alt[field], which must name
// one; booleans negated; numbers and durations one more; lists one longer),
// and checks that build's result changes with it.
func everyField(t *testing.T, cfg any, alt map[string]string, build func() (any, error)) {
	t.Helper()
	base, err := build()
	if err != nil {
		t.Fatalf("%T: %v", cfg, err)
	}
	if again, _ := build(); !reflect.DeepEqual(base, again) {
		t.Fatalf("%T: two builds of the same configuration differ; the check cannot tell a field's effect", cfg)
	}
	v := reflect.ValueOf(cfg).Elem()
	for name := range alt {
		if _, ok := v.Type().FieldByName(name); !ok {
			t.Fatalf("%T has no field %s to try another value of", cfg, name)
		}
	}
	for i := range v.NumField() {
		sf := v.Type().Field(i)
		if sf.Anonymous {
			continue
		}
		f := v.Field(i)
		was := reflect.New(f.Type()).Elem()
		was.Set(f)
		switch f.Kind() {
		case reflect.String:
			a, ok := alt[sf.Name]
			if !ok {
				t.Fatalf("%T.%s: no other value to try", cfg, sf.Name)
			}
			f.SetString(a)
		case reflect.Bool:
			f.SetBool(!f.Bool())
		case reflect.Int, reflect.Int64:
			f.SetInt(f.Int() + 1)
		case reflect.Uint64:
			f.SetUint(f.Uint() + 1)
		case reflect.Slice:
			f.Set(reflect.Append(f, reflect.ValueOf("other")))
		default:
			t.Fatalf("%T.%s: kind %v not handled", cfg, sf.Name, f.Kind())
		}
		got, err := build()
		if err != nil {
			t.Errorf("%T.%s = %v: %v", cfg, sf.Name, f.Interface(), err)
		} else if reflect.DeepEqual(got, base) {
			t.Errorf("%T.%s (DUET_%s) = %v changes nothing the service is given", cfg, sf.Name, sf.Tag.Get("envconfig"), f.Interface())
		} else if o := reflect.ValueOf(got).FieldByName(sf.Name); o.IsValid() && o.Type() == f.Type() && !reflect.DeepEqual(o.Interface(), f.Interface()) {
			t.Errorf("%T.%s (DUET_%s) = %v reaches the service's %s as %v", cfg, sf.Name, sf.Tag.Get("envconfig"), f.Interface(), sf.Name, o.Interface())
		}
		f.Set(was)
	}
}
