// Package docs holds tests that keep README.md true to the code.
package docs

import (
	"os"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/actuator"
	"github.com/duet-mpc/duet/internal/config"
	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/plantsvc"
	"github.com/duet-mpc/duet/internal/sensor"
)

// Configs lists every service's configuration struct.
var Configs = map[string]any{
	"sensor":   &sensor.Config{},
	"party":    &party.Config{},
	"actuator": &actuator.Config{},
	"dealer":   &dealer.Config{},
	"plant":    &plantsvc.Config{},
}

// TestREADMEConfigTables checks that README.md carries each service's
// configuration table exactly as the code defines it (regenerate with
// `go test ./internal/docs -run README -update` after changing a Config).
func TestREADMEConfigTables(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	common := config.Markdown(&config.Common{})
	if !strings.Contains(readme, common) {
		t.Errorf("README.md lacks the common configuration table:\n%s", common)
	}
	for name, cfg := range Configs {
		table := config.Markdown(cfg)
		// The README shows each service's own rows after the common ones.
		own := strings.TrimPrefix(table, common[:strings.Index(common, "\n|---|---|---|\n")+len("\n|---|---|---|\n")])
		for _, line := range strings.Split(strings.TrimSpace(own), "\n") {
			if strings.Contains(common, line) {
				continue
			}
			if !strings.Contains(readme, line) {
				t.Errorf("README.md lacks the %s configuration row:\n%s", name, line)
			}
		}
	}
}
