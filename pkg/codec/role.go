package codec

import "fmt"

// Role is a participant of a control loop (protocol.md §1). Each role holds
// one X25519 identity; every message names its sender and recipient role.
type Role uint8

// The roles. The zero value is not a role.
const (
	RoleSensor Role = iota + 1
	RoleParty0
	RoleParty1
	RoleActuator
	RoleDealer
	RolePlant
)

// AllRoles lists every role in wire order.
var AllRoles = []Role{RoleSensor, RoleParty0, RoleParty1, RoleActuator, RoleDealer, RolePlant}

var roleNames = [...]string{
	RoleSensor:   "sensor",
	RoleParty0:   "party0",
	RoleParty1:   "party1",
	RoleActuator: "actuator",
	RoleDealer:   "dealer",
	RolePlant:    "plant",
}

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r >= RoleSensor && r <= RolePlant }

// String returns the role's name ("sensor", "party0", ...), used in file names
// and logs; an invalid role prints as "role(N)".
func (r Role) String() string {
	if !r.Valid() {
		return fmt.Sprintf("role(%d)", uint8(r))
	}
	return roleNames[r]
}

// ParseRole is the inverse of String.
func ParseRole(s string) (Role, error) {
	for _, r := range AllRoles {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: %q is not one of sensor, party0, party1, actuator, dealer, plant", ErrRole, s)
}

// PartyRole returns the role of computing party id: 0 -> RoleParty0,
// 1 -> RoleParty1. Any other id gives the invalid role 0, which every
// function of this package rejects.
func PartyRole(id int) Role {
	switch id {
	case 0:
		return RoleParty0
	case 1:
		return RoleParty1
	}
	return 0
}

// PartyID is the inverse of PartyRole; ok is false for non-party roles.
func (r Role) PartyID() (id int, ok bool) {
	switch r {
	case RoleParty0:
		return 0, true
	case RoleParty1:
		return 1, true
	}
	return 0, false
}

// Kind is the type of a message; it fixes the payload type and the route.
type Kind uint8

// The message kinds. The zero value is not a kind.
const (
	KindMeasure     Kind = iota + 1 // sensor -> party i: share of y_t (MeasurePayload)
	KindMul                         // party -> other party: Protocol 1 message (MulPayload)
	KindTrunc                       // party0 -> party1: Protocol 2 message (TruncPayload)
	KindOutput                      // party -> actuator: share of u_t (OutputPayload)
	KindTick                        // sensor -> actuator: tick notice (TickPayload)
	KindSetup                       // sensor -> party i or actuator: set-up (SetupPayload)
	KindDealerSetup                 // sensor -> dealer: loop registration (DealerSetupPayload)
	KindMaterial                    // dealer -> party i: one party's item material (MaterialPayload)
	KindPlantY                      // plant -> sensor (PlantYPayload); sensor -> plant: request
	KindPlantU                      // actuator -> plant (PlantUPayload)
	// The two-hop tick (docs/two-hop-design.md); numbered after the
	// others, so that no earlier kind's number moves.
	KindPreT          // party -> other party: state part of T opened between ticks (MulPayload)
	KindMaskY         // party i -> sensor: share of the next item's V_y (MaskYPayload)
	KindMeasureMasked // sensor -> party i: ȳ_t - V_y,t, public to both parties (MeasureMaskedPayload)
	kindEnd
)

var kindNames = [...]string{
	KindMeasure:       "measure",
	KindMul:           "mul",
	KindTrunc:         "trunc",
	KindOutput:        "output",
	KindTick:          "tick",
	KindSetup:         "setup",
	KindDealerSetup:   "dealer_setup",
	KindMaterial:      "material",
	KindPlantY:        "plant_y",
	KindPlantU:        "plant_u",
	KindPreT:          "pre_t",
	KindMaskY:         "mask_y",
	KindMeasureMasked: "measure_masked",
}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool { return k >= KindMeasure && k < kindEnd }

// String returns the kind's name ("measure", "mul", ...), usable as a metrics
// label; an invalid kind prints as "kind(N)".
func (k Kind) String() string {
	if !k.Valid() {
		return fmt.Sprintf("kind(%d)", uint8(k))
	}
	return kindNames[k]
}

// route is a set of (from, to) pairs as a bit mask: bit 8*from + to.
type route uint64

func edge(from, to Role) route { return 1 << (8*uint(from) + uint(to)) }

// routes is the only place message routes are defined: a kind is accepted
// (by Seal and by Open) only from the sender to the recipient listed here,
// so a compromised party cannot, for example, send the other party a set-up.
var routes = [kindEnd]route{
	KindMeasure:       edge(RoleSensor, RoleParty0) | edge(RoleSensor, RoleParty1),
	KindMul:           edge(RoleParty0, RoleParty1) | edge(RoleParty1, RoleParty0),
	KindTrunc:         edge(RoleParty0, RoleParty1),
	KindOutput:        edge(RoleParty0, RoleActuator) | edge(RoleParty1, RoleActuator),
	KindTick:          edge(RoleSensor, RoleActuator),
	KindSetup:         edge(RoleSensor, RoleParty0) | edge(RoleSensor, RoleParty1) | edge(RoleSensor, RoleActuator),
	KindDealerSetup:   edge(RoleSensor, RoleDealer),
	KindMaterial:      edge(RoleDealer, RoleParty0) | edge(RoleDealer, RoleParty1),
	KindPlantY:        edge(RolePlant, RoleSensor) | edge(RoleSensor, RolePlant), // request and reply
	KindPlantU:        edge(RoleActuator, RolePlant),
	KindPreT:          edge(RoleParty0, RoleParty1) | edge(RoleParty1, RoleParty0),
	KindMaskY:         edge(RoleParty0, RoleSensor) | edge(RoleParty1, RoleSensor),
	KindMeasureMasked: edge(RoleSensor, RoleParty0) | edge(RoleSensor, RoleParty1),
}

// Allowed reports whether a message of kind k may go from one role to
// another (the routes in the Kind constants' comments).
func Allowed(k Kind, from, to Role) bool {
	return k.Valid() && from.Valid() && to.Valid() && routes[k]&edge(from, to) != 0
}
