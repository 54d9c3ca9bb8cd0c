// Package acl is the single definition of what each duet role may publish
// and subscribe to on NATS, and renders it as nkey users for an embedded
// server or as a nats-server configuration file, so that tests, the demo and
// deployments enforce the same rules.
package acl

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/duet-mpc/duet/internal/bus"
	"github.com/duet-mpc/duet/pkg/codec"
)

// Inbox is the custom inbox prefix of a role: replies to a role's requests
// (JetStream API, publish acknowledgements, the plant's answers) arrive
// under it, and only that role may subscribe to it.
func Inbox(r codec.Role) string { return "_INBOX_" + r.String() }

// Perms is one role's permissions.
type Perms struct {
	Pub, Sub []string
	// PubDeny and SubDeny take precedence over Pub and Sub.
	PubDeny, SubDeny []string
	// Responses lets the role answer requests sent to it (the plant).
	Responses bool
}

const js = "$JS.API."

// Permissions returns the role's permissions. Subjects use * for the loop
// id, so one set of users serves any number of loops.
func Permissions(r codec.Role) Perms {
	const (
		// Any stream: NATS wildcards match whole tokens only, so
		// "DUET_OFFLINE_*" cannot be expressed; the consumer names and the
		// KV bucket names below still pin each role to its own resources.
		offline = "*"
		setup   = "KV_" + bus.SetupBucket
	)
	loop := "*" // any loop id
	subj := func(format string, a ...interface{}) string { return fmt.Sprintf(format, a...) }
	getSetup := func(role codec.Role) string {
		return js + "DIRECT.GET." + setup + ".$KV." + bus.SetupBucket + "." + loop + "." + role.String()
	}
	state := func(i int) []string {
		b := "KV_" + stateBucket(i)
		return []string{js + "STREAM.CREATE." + b, js + "STREAM.UPDATE." + b, js + "STREAM.INFO." + b,
			"$KV." + stateBucket(i) + ".>", js + "DIRECT.GET." + b + ".>"}
	}
	var p Perms
	switch r {
	case codec.RoleSensor:
		p.Pub = []string{
			subj("%s.%s.measure.p0", bus.Prefix, loop), subj("%s.%s.measure.p1", bus.Prefix, loop),
			subj("%s.%s.tick", bus.Prefix, loop), subj("%s.%s.plant.y", bus.Prefix, loop),
			js + "INFO",
			js + "STREAM.CREATE." + offline, js + "STREAM.UPDATE." + offline, js + "STREAM.INFO." + offline,
			js + "CONSUMER.CREATE." + offline + ".>", js + "CONSUMER.DURABLE.CREATE." + offline + ".>",
			js + "CONSUMER.INFO." + offline + ".*",
			js + "STREAM.CREATE." + setup, js + "STREAM.UPDATE." + setup, js + "STREAM.INFO." + setup,
			"$KV." + bus.SetupBucket + ".>", getSetup(codec.RoleSensor),
		}
		p.Sub = []string{subj("%s.%s.masky", bus.Prefix, loop)}
	case codec.RoleParty0, codec.RoleParty1:
		i, _ := r.PartyID()
		p.Pub = append([]string{
			subj("%s.%s.x.p%d", bus.Prefix, loop, 1-i), subj("%s.%s.out", bus.Prefix, loop),
			subj("%s.%s.masky", bus.Prefix, loop),
			js + "INFO",
			js + "STREAM.INFO." + offline,
			js + "CONSUMER.INFO." + offline + "." + bus.ConsumerName(i),
			js + "CONSUMER.MSG.NEXT." + offline + "." + bus.ConsumerName(i),
			js + "STREAM.INFO." + setup, getSetup(r),
		}, state(i)...)
		p.Sub = []string{subj("%s.%s.*.p%d", bus.Prefix, loop, i)}
	case codec.RoleActuator:
		p.Pub = []string{subj("%s.%s.plant.u", bus.Prefix, loop), js + "INFO", js + "STREAM.INFO." + setup, getSetup(r)}
		p.Sub = []string{subj("%s.%s.tick", bus.Prefix, loop), subj("%s.%s.out", bus.Prefix, loop)}
	case codec.RoleDealer:
		p.Pub = []string{
			bus.Prefix + ".offline.*",
			js + "INFO", js + "STREAM.INFO." + offline, js + "STREAM.INFO." + setup,
			// The queue depth each party sees.
			js + "CONSUMER.INFO." + offline + "." + bus.ConsumerName(0), js + "CONSUMER.INFO." + offline + "." + bus.ConsumerName(1),
			// Watching the dealer records: an ordered pull consumer on the
			// bucket's stream, created with their filter and no other
			// (the server refuses a create whose configuration's filter
			// differs from its subject's), so no other role's record.
			js + "CONSUMER.CREATE." + setup + ".*." + bus.DealerSetupFilter,
			js + "CONSUMER.MSG.NEXT." + setup + ".*", js + "CONSUMER.DELETE." + setup + ".*",
		}
	case codec.RolePlant:
		p.Sub = []string{subj("%s.%s.plant.y", bus.Prefix, loop), subj("%s.%s.plant.u", bus.Prefix, loop)}
		p.Responses = true
	}
	p.Sub = append(p.Sub, Inbox(r)+".>")
	if r != codec.RoleDealer {
		// The offline queues' subjects, duet.offline.<loop>, match the
		// three-token loop subjects above (duet.*.out, duet.*.masky,
		// duet.*.tick) for the loops named out, masky and tick: without
		// this, a party could publish into loop out's queue and the
		// sensor or the actuator read loop tick's.
		p.PubDeny = []string{bus.Prefix + ".offline.>"}
		p.SubDeny = []string{bus.Prefix + ".offline.>"}
	}
	return p
}

// stateBucket mirrors party.StateBucket (acl must not import party).
func stateBucket(i int) string { return fmt.Sprintf("duet-state-party%d", i) }

// NkeyUsers returns the server's users: one nkey user per role with that
// role's permissions. users maps each role to its NATS user public key.
func NkeyUsers(users map[codec.Role]string) []*server.NkeyUser {
	var out []*server.NkeyUser
	for _, r := range codec.AllRoles {
		pub, ok := users[r]
		if !ok {
			continue
		}
		p := Permissions(r)
		perm := &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.Pub, Deny: p.PubDeny},
			Subscribe: &server.SubjectPermission{Allow: p.Sub, Deny: p.SubDeny},
		}
		if len(p.Pub) == 0 {
			perm.Publish = &server.SubjectPermission{Deny: []string{">"}}
		}
		if p.Responses {
			perm.Response = &server.ResponsePermission{MaxMsgs: 1}
		}
		out = append(out, &server.NkeyUser{Nkey: pub, Permissions: perm})
	}
	return out
}

// Config renders the authorization block of a nats-server configuration
// file for the users (include it from the main configuration).
func Config(users map[codec.Role]string) string {
	var b strings.Builder
	b.WriteString("# Generated by 'duet keys': one nkey user per duet role.\nauthorization {\n  users = [\n")
	roles := make([]codec.Role, 0, len(users))
	for r := range users {
		roles = append(roles, r)
	}
	sort.Slice(roles, func(i, j int) bool { return roles[i] < roles[j] })
	list := func(xs []string) string {
		q := make([]string, len(xs))
		for i, x := range xs {
			q[i] = fmt.Sprintf("%q", x)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	// deny is the denials after an allow list, if any.
	deny := func(xs []string) string {
		if len(xs) == 0 {
			return ""
		}
		return ", deny: " + list(xs)
	}
	for _, r := range roles {
		p := Permissions(r)
		fmt.Fprintf(&b, "    # %s\n    { nkey: %s\n      permissions: {\n", r, users[r])
		if len(p.Pub) > 0 {
			fmt.Fprintf(&b, "        publish: { allow: %s%s }\n", list(p.Pub), deny(p.PubDeny))
		} else {
			b.WriteString("        publish: { deny: [\">\"] }\n")
		}
		fmt.Fprintf(&b, "        subscribe: { allow: %s%s }\n", list(p.Sub), deny(p.SubDeny))
		if p.Responses {
			b.WriteString("        allow_responses: { max: 1 }\n")
		}
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}
