// Command dealer pre-generates matrix triples and truncation masks into the
// offline queues; run any number of replicas. Configuration: DUET_
// environment variables (-h lists them).
package main

import (
	"context"

	"github.com/duet-mpc/duet/internal/dealer"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg dealer.Config
	service.Main("dealer", func() codec.Role { return codec.RoleDealer }, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt, err := cfg.Options(env.Log, env.Metrics)
		if err != nil {
			return err
		}
		d, err := dealer.New(env.NC, env.Sealer, opt)
		if err != nil {
			return err
		}
		ready := d.Ready
		env.Ready.Store(&ready)
		return d.Run(ctx)
	})
}
