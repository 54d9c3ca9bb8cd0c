// Command party is P0 or P1 (DUET_PARTY): it runs Protocol 3 each tick with
// the other party. Configuration: DUET_ environment variables (-h lists them).
package main

import (
	"context"

	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg party.Config
	role := func() codec.Role { return codec.PartyRole(cfg.Party) }
	service.Main("party", role, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt, err := cfg.Options(env.Identity, env.Log, env.Metrics)
		if err != nil {
			return err
		}
		p, err := party.New(env.NC, env.Sealer, opt)
		if err != nil {
			return err
		}
		ready := p.Ready
		env.Ready.Store(&ready)
		return p.Run(ctx)
	})
}
