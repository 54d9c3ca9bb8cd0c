// Command party is P0 or P1 (DUET_PARTY): it runs Protocol 3 each tick with
// the other party. Configuration: DUET_ environment variables (-h lists them).
package main

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/duet-mpc/duet/internal/party"
	"github.com/duet-mpc/duet/internal/service"
	"github.com/duet-mpc/duet/pkg/codec"
)

func main() {
	var cfg party.Config
	role := func() codec.Role { return codec.PartyRole(cfg.Party) }
	service.Main("party", role, &cfg, &cfg.Common, func(ctx context.Context, env *service.Env) error {
		opt := party.Options{ID: cfg.Party, Loops: cfg.Loops, Prefetch: cfg.Prefetch,
			ItemWait: cfg.ItemWait, Log: env.Log, Metrics: env.Metrics, StateReplicas: cfg.StateReplicas,
			PersistDelay: cfg.PersistDelay, PeerBatch: cfg.PeerBatch, TwoHop: cfg.TwoHop}
		if opt.PersistDelay == 0 {
			opt.PersistDelay = -1 // at once
		}
		if cfg.Persist {
			key, err := party.StateKey(env.Identity)
			if err != nil {
				return err
			}
			opt.StateKey = &key
			opt.StateStorage = jetstream.MemoryStorage
			if cfg.StateFileStore {
				opt.StateStorage = jetstream.FileStorage
			}
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
