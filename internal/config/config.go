// Package config loads a service's configuration from DUET_ environment
// variables with envconfig, prints it for -h, and refuses unknown DUET_
// variables so that a typo cannot silently fall back to a default.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
)

// Prefix of every variable.
const Prefix = "DUET"

// Common settings of every service.
type Common struct {
	NATSURL  string `envconfig:"NATS_URL" default:"nats://127.0.0.1:4222" desc:"NATS server URL(s), comma-separated"`
	KeysDir  string `envconfig:"KEYS_DIR" default:"keys" desc:"directory holding this role's <role>.seed and every role's <role>.pub (from 'duet keys')"`
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":9100" desc:"listen address for /metrics, /healthz and /readyz (empty: disabled)"`
	LogLevel string `envconfig:"LOG_LEVEL" default:"info" desc:"log level: debug, info, warn or error"`
	Creds    string `envconfig:"NATS_CREDS" default:"" desc:"NATS credentials: an nkey seed file for this service's NATS user (empty: none)"`
	TLSCA    string `envconfig:"TLS_CA" default:"" desc:"CA certificate to verify the NATS server (empty: no TLS)"`
}

// CommonConfig is the Common a service's configuration embeds (config.Load
// finds it through this method, promoted by the embedding).
func (c *Common) CommonConfig() *Common { return c }

// Validate refuses the common variables' bad values, each naming its
// variable: a log level other than the four names (slog alone also takes
// "info+2") and an empty server URL (nats.go would dial 127.0.0.1:4222
// instead). DUET_TLS_CA is read, and refused if it holds no certificate,
// when the service connects (service.Run).
func (c *Common) Validate() error {
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("DUET_LOG_LEVEL %q: want debug, info, warn or error", c.LogLevel)
	}
	if strings.TrimSpace(c.NATSURL) == "" {
		return errors.New("DUET_NATS_URL is empty: want the NATS server URL(s), comma-separated")
	}
	return nil
}

// Load fills cfg (a pointer to a struct) from the environment. args are the
// command-line arguments: -h or --help prints the variables to w and returns
// ErrHelp. Unknown DUET_ variables and invalid values are errors.
func Load(cfg any, args []string, w io.Writer) error {
	for _, a := range args {
		if a == "-h" || a == "--help" || a == "-help" {
			Usage(cfg, w)
			return ErrHelp
		}
		return fmt.Errorf("config: unexpected argument %q: services are configured by %s_ environment variables (-h lists them)", a, Prefix)
	}
	known := map[string]bool{}
	for _, k := range Keys(cfg) {
		known[k] = true
	}
	var unknown []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, Prefix+"_") && !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return fmt.Errorf("config: unknown variable(s) %s (-h lists the valid ones)", strings.Join(unknown, ", "))
	}
	// envconfig would say "required key PARTY missing value": name the
	// variable as the user sets it, with what it means.
	for _, f := range fields(cfg) {
		if _, set := os.LookupEnv(f.key); f.required && !set {
			return fmt.Errorf("config: %s is required and not set: %s (-h lists the variables)", f.key, f.desc)
		}
	}
	// envconfig falls back to the variable without the prefix (LOG_LEVEL
	// for DUET_LOG_LEVEL) when the prefixed one is unset: such variables are
	// hidden from it, so that only DUET_ variables configure a service (a
	// PERIOD or LOOP meant for something else in the environment must not).
	for _, f := range fields(cfg) {
		bare := strings.TrimPrefix(f.key, Prefix+"_")
		if _, set := os.LookupEnv(f.key); set {
			continue
		}
		if v, ok := os.LookupEnv(bare); ok {
			os.Unsetenv(bare)
			defer os.Setenv(bare, v)
		}
	}
	if err := envconfig.Process(Prefix, cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	// The common variables first (a service's own Validate would hide
	// Common's, which it embeds).
	if c, ok := cfg.(interface{ CommonConfig() *Common }); ok {
		if err := c.CommonConfig().Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	if v, ok := cfg.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}

// ErrHelp is returned by Load after printing help.
var ErrHelp = fmt.Errorf("config: help requested")

type field struct {
	key, def, desc, typ string
	required            bool
}

func fields(cfg any) []field {
	var out []field
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				walk(f.Type)
				continue
			}
			name := f.Tag.Get("envconfig")
			if name == "" || name == "-" {
				continue
			}
			out = append(out, field{key: Prefix + "_" + name, def: f.Tag.Get("default"), desc: f.Tag.Get("desc"),
				typ: f.Type.String(), required: f.Tag.Get("required") == "true"})
		}
	}
	walk(reflect.TypeOf(cfg).Elem())
	return out
}

// Keys lists the variable names of cfg.
func Keys(cfg any) []string {
	var ks []string
	for _, f := range fields(cfg) {
		ks = append(ks, f.key)
	}
	return ks
}

// Usage prints every variable with its type, default and meaning.
func Usage(cfg any, w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tTYPE\tDEFAULT\tMEANING")
	for _, f := range fields(cfg) {
		def := f.def
		if f.required {
			def = "(required)"
		} else if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.key, f.typ, def, f.desc)
	}
	tw.Flush()
}

// Markdown renders the variables as a Markdown table (for README).
func Markdown(cfg any) string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, f := range fields(cfg) {
		def := "`" + f.def + "`"
		if f.required {
			def = "required"
		} else if f.def == "" {
			def = "empty"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", f.key, def, f.desc)
	}
	return b.String()
}
