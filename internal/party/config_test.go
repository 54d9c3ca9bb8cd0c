package party

import (
	"errors"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/internal/natstest"
	"github.com/duet-mpc/duet/pkg/codec"
)

// A loop listed twice would give two workers one consumer and one state
// record, and an invalid id would stop Run after other loops had started:
// both are refused before anything runs, naming the loop.
func TestLoopsChecked(t *testing.T) {
	c := Config{Party: 0, Loops: []string{"a", "b", "a"}, Prefetch: 8, StateReplicas: 1, PeerBatch: 1, ItemWait: 1}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `DUET_LOOPS: loop "a" is listed twice`) {
		t.Errorf("Validate with a loop twice: %v", err)
	}
	c.Loops = []string{"a", "no spaces"}
	if err := c.Validate(); !errors.Is(err, codec.ErrLoopID) {
		t.Errorf("Validate with an invalid loop id: %v, want ErrLoopID", err)
	}
	c.Loops = []string{"a", "b"}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate with two loops: %v", err)
	}
	nc := natstest.Conn(t)
	for _, loops := range [][]string{{"a", "a"}, {"a", "b.c"}} {
		if _, err := New(nc, testSealer(t, codec.RoleParty0), Options{ID: 0, Loops: loops}); err == nil {
			t.Errorf("New with loops %q: no error", loops)
		}
	}
}
