// Package docs holds tests that keep README.md true to the code.
package docs

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
)

var update = flag.Bool("update", false, "rewrite README.md's configuration tables")

// Configs lists every service's configuration struct.
var Configs = map[string]any{
	"sensor":   &sensor.Config{},
	"party":    &party.Config{},
	"actuator": &actuator.Config{},
	"dealer":   &dealer.Config{},
	"plant":    &plantsvc.Config{},
}

// table renders a service's own rows (the common ones are in their own table).
func table(key string) string {
	common := config.Markdown(&config.Common{})
	if key == "common" {
		return strings.TrimSpace(common)
	}
	var rows []string
	for _, l := range strings.Split(strings.TrimSpace(config.Markdown(Configs[key])), "\n")[2:] {
		if !strings.Contains(common, l) {
			rows = append(rows, l)
		}
	}
	return "| variable | default | meaning |\n|---|---|---|\n" + strings.Join(rows, "\n")
}

var block = regexp.MustCompile(`(?s)<!-- config:(\w+) -->\n(.*?)\n<!-- /config -->`)

// TestREADMEConfigTables checks that README.md carries each service's
// configuration table exactly as the code defines it. After changing a
// Config, regenerate with: go test ./internal/docs -update
func TestREADMEConfigTables(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	seen := map[string]bool{}
	out := block.ReplaceAllStringFunc(readme, func(m string) string {
		sub := block.FindStringSubmatch(m)
		key, got := sub[1], sub[2]
		seen[key] = true
		want := table(key)
		if got != want && !*update {
			t.Errorf("README.md's %s configuration table is stale (go test ./internal/docs -update):\n%s", key, want)
		}
		return "<!-- config:" + key + " -->\n" + want + "\n<!-- /config -->"
	})
	for _, k := range []string{"common", "sensor", "party", "actuator", "dealer", "plant"} {
		if !seen[k] {
			t.Errorf("README.md has no <!-- config:%s --> table", k)
		}
	}
	if *update {
		if err := os.WriteFile("../../README.md", []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
