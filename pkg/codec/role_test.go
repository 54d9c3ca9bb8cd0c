package codec

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestRoleNames(t *testing.T) {
	want := []string{"sensor", "party0", "party1", "actuator", "dealer", "plant"}
	if len(AllRoles) != len(want) {
		t.Fatalf("len(AllRoles) = %d, want %d", len(AllRoles), len(want))
	}
	for i, r := range AllRoles {
		if r != Role(i+1) {
			t.Errorf("AllRoles[%d] = %d, want %d", i, r, i+1)
		}
		if got := r.String(); got != want[i] {
			t.Errorf("Role(%d).String() = %q, want %q", r, got, want[i])
		}
		got, err := ParseRole(want[i])
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %v, %v, want %v", want[i], got, err, r)
		}
	}
	for _, s := range []string{"", "Sensor", "party2", "role(1)"} {
		if _, err := ParseRole(s); !errors.Is(err, ErrRole) {
			t.Errorf("ParseRole(%q): err = %v, want ErrRole", s, err)
		}
	}
	if got := Role(0).String(); got != "role(0)" {
		t.Errorf("Role(0).String() = %q", got)
	}
	if got := Role(7).String(); got != "role(7)" {
		t.Errorf("Role(7).String() = %q", got)
	}
}

func TestPartyRole(t *testing.T) {
	for id, want := range []Role{RoleParty0, RoleParty1} {
		if got := PartyRole(id); got != want {
			t.Errorf("PartyRole(%d) = %v, want %v", id, got, want)
		}
		if got, ok := want.PartyID(); !ok || got != id {
			t.Errorf("%v.PartyID() = %d, %v, want %d", want, got, ok, id)
		}
	}
	for _, id := range []int{-1, 2, 100} {
		if got := PartyRole(id); got.Valid() {
			t.Errorf("PartyRole(%d) = %v, want an invalid role", id, got)
		}
	}
	if _, ok := RoleSensor.PartyID(); ok {
		t.Error("RoleSensor.PartyID() ok")
	}
}

func TestKindNames(t *testing.T) {
	want := []string{"measure", "mul", "trunc", "output", "tick", "setup", "dealer_setup", "material", "plant_y", "plant_u",
		"pre_t", "mask_y", "measure_masked"}
	for i, name := range want {
		k := Kind(i + 1)
		if !k.Valid() || k.String() != name {
			t.Errorf("Kind(%d) = %q (valid %v), want %q", k, k.String(), k.Valid(), name)
		}
	}
	for _, k := range []Kind{0, Kind(len(want) + 1), 255} {
		if k.Valid() || k.String() != fmt.Sprintf("kind(%d)", uint8(k)) {
			t.Errorf("Kind(%d): valid %v, name %q", k, k.Valid(), k.String())
		}
	}
}

// TestRoutes checks Allowed exhaustively against the routes in the Kind
// constants' comments.
func TestRoutes(t *testing.T) {
	want := map[testRoute]bool{
		{KindMeasure, RoleSensor, RoleParty0}:       true,
		{KindMeasure, RoleSensor, RoleParty1}:       true,
		{KindMul, RoleParty0, RoleParty1}:           true,
		{KindMul, RoleParty1, RoleParty0}:           true,
		{KindTrunc, RoleParty0, RoleParty1}:         true,
		{KindOutput, RoleParty0, RoleActuator}:      true,
		{KindOutput, RoleParty1, RoleActuator}:      true,
		{KindTick, RoleSensor, RoleActuator}:        true,
		{KindSetup, RoleSensor, RoleParty0}:         true,
		{KindSetup, RoleSensor, RoleParty1}:         true,
		{KindSetup, RoleSensor, RoleActuator}:       true,
		{KindDealerSetup, RoleSensor, RoleDealer}:   true,
		{KindMaterial, RoleDealer, RoleParty0}:      true,
		{KindMaterial, RoleDealer, RoleParty1}:      true,
		{KindPlantY, RolePlant, RoleSensor}:         true,
		{KindPlantY, RoleSensor, RolePlant}:         true,
		{KindPlantU, RoleActuator, RolePlant}:       true,
		{KindPreT, RoleParty0, RoleParty1}:          true,
		{KindPreT, RoleParty1, RoleParty0}:          true,
		{KindMaskY, RoleParty0, RoleSensor}:         true,
		{KindMaskY, RoleParty1, RoleSensor}:         true,
		{KindMeasureMasked, RoleSensor, RoleParty0}: true,
		{KindMeasureMasked, RoleSensor, RoleParty1}: true,
	}
	for k := Kind(0); k <= kindEnd; k++ {
		for from := Role(0); from <= RolePlant+1; from++ {
			for to := Role(0); to <= RolePlant+1; to++ {
				r := testRoute{k, from, to}
				if got := Allowed(k, from, to); got != want[r] {
					t.Errorf("Allowed(%v, %v, %v) = %v, want %v", k, from, to, got, want[r])
				}
			}
		}
	}
	if n := len(allowedRoutes()); n != len(want) {
		t.Errorf("%d allowed routes, want %d", n, len(want))
	}
}

func TestValidLoopID(t *testing.T) {
	for _, s := range []string{"a", "loop-1", "Qube_servo2", strings.Repeat("z", 64), "0-_"} {
		if err := ValidLoopID(s); err != nil {
			t.Errorf("ValidLoopID(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", strings.Repeat("z", 65), "a.b", "a b", "a*", "a>", "é", "a\x00", "a/b", ReservedLoopID} {
		if err := ValidLoopID(s); !errors.Is(err, ErrLoopID) {
			t.Errorf("ValidLoopID(%q) = %v, want ErrLoopID", s, err)
		}
	}
}

func TestReason(t *testing.T) {
	for _, r := range reasons {
		wrapped := fmt.Errorf("context: %w", fmt.Errorf("%w: detail", r.err))
		if got := Reason(wrapped); got != r.label {
			t.Errorf("Reason(%v) = %q, want %q", wrapped, got, r.label)
		}
		if !strings.HasPrefix(r.err.Error(), "codec: ") {
			t.Errorf("%q lacks the codec: prefix", r.err)
		}
	}
	if len(reasons) != 16 {
		t.Errorf("%d sentinels, want 16", len(reasons))
	}
	for _, err := range []error{nil, errors.New("x")} {
		if got := Reason(err); got != "other" {
			t.Errorf("Reason(%v) = %q, want other", err, got)
		}
	}
}
