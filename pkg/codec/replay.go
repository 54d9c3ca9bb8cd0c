package codec

import (
	"fmt"
	"sync"
	"time"
)

// ReplayGuard is a receiver's replay protection: a message is fresh only if
// its tick is strictly greater than the last accepted tick for the same
// (sender, kind, loop). The broker may replay, reorder or delay envelopes;
// a stale one is refused rather than reprocessed. Use it on headers returned
// by Sealer.Open, which are authenticated.
//
// It is safe for concurrent use. Memory grows with the number of loops seen;
// Reset drops a loop.
type ReplayGuard struct {
	mu    sync.Mutex
	loops map[string]*replayLoop
	// last is the loop found last and lastID its ID: a guard that serves
	// one loop (a party worker's) finds it without hashing its ID for every
	// message. Reset forgets it with the loop.
	lastID string
	last   *replayLoop
}

// replayLoop holds, per sender and kind, the last accepted tick.
type replayLoop [RolePlant + 1][kindEnd]struct {
	seen bool
	tick uint64
}

// NewReplayGuard returns an empty guard.
func NewReplayGuard() *ReplayGuard {
	return &ReplayGuard{loops: make(map[string]*replayLoop)}
}

// ReachAhead is how far beyond the newest tick a receiver knows the sensor
// sent it takes a message of a sender that only follows the sensor's ticks
// (a party's output share at the actuator, the other party's Protocol 1
// message at a party); see Reach. The other sender is a few ticks ahead at
// most, and the sensor jumps at most its resume margin (100 ticks) when it
// resumes.
const ReachAhead = 1 << 10

// NotBefore refuses, as ErrReplay, a message stamped (sent: Unix ns on the
// sensor's clock) before epoch, its set-up's creation on that clock: the
// sensor stamps none of a set-up earlier, so it is an earlier set-up's,
// which a broker that kept it can replay, since a new set-up numbers its
// ticks from 1 again and its receivers' guards start empty. what names the
// message in the error.
func NotBefore(what string, sent int64, epoch uint64) error {
	if sent < int64(epoch) {
		return fmt.Errorf("%w: %s sent at %d, before this set-up (epoch %d): an earlier set-up's", ErrReplay, what, sent, epoch)
	}
	return nil
}

// SameEpoch refuses a message carrying the set-up epoch got where this
// set-up's is want: one without (0, a sender of an earlier release; older
// says what to do) as the wire version, one of another epoch as an earlier
// set-up's, replayed (a new set-up numbers its ticks from 1 again). what
// names the message in the error.
func SameEpoch(what string, got, want uint64, older string) error {
	switch {
	case got == want:
		return nil
	case got == 0:
		return fmt.Errorf("%w: %s without the set-up epoch: %s", ErrVersion, what, older)
	}
	return fmt.Errorf("%w: %s of set-up epoch %d, this set-up's is %d: an earlier set-up's, replayed", ErrReplay, what, got, want)
}

// Reach is the furthest tick such a receiver takes: ReachAhead beyond
// latest, the newest tick it knows the sensor sent (which it learnt at at),
// plus one tick a millisecond, the sensor's shortest period, since then, for
// a receiver that heard nothing for a while (a partition, a server restart,
// the plant down) and whose first message after it is another sender's. A
// faulty sender's far tick, refused, cannot take the receiver's ReplayGuard
// for its kind, which would refuse every later tick of that sender as a
// replay.
func Reach(latest uint64, at time.Time) uint64 {
	return latest + ReachAhead + uint64(time.Since(at)/time.Millisecond)
}

// Check reports whether h would be accepted, without recording it.
func (g *ReplayGuard) Check(h Header) error {
	if err := checkReplayHeader(h); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.check(h)
}

// Accept checks h and, if it is fresh, records its tick.
func (g *ReplayGuard) Accept(h Header) error {
	if err := checkReplayHeader(h); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(h); err != nil {
		return err
	}
	l := g.find(h.Loop)
	if l == nil {
		l = new(replayLoop)
		g.loops[h.Loop] = l
	}
	l[h.From][h.Kind].seen = true
	l[h.From][h.Kind].tick = h.Tick
	return nil
}

// Restore marks every tick up to and including tick as seen for every sender
// and kind of loop, as after a restart from persisted state: messages from
// before the crash are then refused as replays.
func (g *ReplayGuard) Restore(loop string, tick uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.loops[loop]
	if l == nil {
		l = new(replayLoop)
		g.loops[loop] = l
	}
	for from := range l {
		for k := range l[from] {
			if e := &l[from][k]; !e.seen || e.tick < tick {
				e.seen, e.tick = true, tick
			}
		}
	}
}

// Reset forgets every tick of loop, so that tick numbering may restart (for
// example after a set-up epoch change).
func (g *ReplayGuard) Reset(loop string) {
	g.mu.Lock()
	delete(g.loops, loop)
	if g.lastID == loop {
		g.lastID, g.last = "", nil
	}
	g.mu.Unlock()
}

// find returns loop's counters, nil if none (under mu).
func (g *ReplayGuard) find(loop string) *replayLoop {
	if g.last != nil && loop == g.lastID {
		return g.last
	}
	l := g.loops[loop]
	if l != nil {
		g.lastID, g.last = loop, l
	}
	return l
}

func (g *ReplayGuard) check(h Header) error {
	l := g.find(h.Loop)
	if l == nil {
		return nil
	}
	if last := l[h.From][h.Kind]; last.seen && h.Tick <= last.tick {
		return fmt.Errorf("%w: %s from %s, loop %s: tick %d, last accepted %d", ErrReplay, h.Kind, h.From, h.Loop, h.Tick, last.tick)
	}
	return nil
}

func checkReplayHeader(h Header) error {
	switch {
	case !h.Kind.Valid():
		return fmt.Errorf("%w: %d", ErrKind, uint8(h.Kind))
	case !h.From.Valid():
		return fmt.Errorf("%w: sender %d", ErrRole, uint8(h.From))
	case h.Tick > MaxTick:
		return fmt.Errorf("%w: %s from %s, loop %s: tick %d above the largest a loop reaches, 2^62", ErrMalformed, h.Kind, h.From, h.Loop, h.Tick)
	}
	return nil
}

// Admit is the receiving side of an opened envelope: it checks h is fresh,
// decodes body into v, runs validate (shape and range checks on v), and only
// then records h's tick, so a well-sealed but malformed message cannot move
// the expected tick. It returns the first failure.
func (g *ReplayGuard) Admit(h Header, body []byte, v any, validate func() error) error {
	return g.admit(h, body, v, validate, Unmarshal)
}

// AdmitView is Admit decoding with UnmarshalView: v's matrices may alias
// body, so validate must be done with them (decoded them into field
// elements) before body is overwritten.
func (g *ReplayGuard) AdmitView(h Header, body []byte, v any, validate func() error) error {
	return g.admit(h, body, v, validate, UnmarshalView)
}

// AdmitDecoded is Admit for a payload the caller has decoded already (to
// look at it before its freshness is checked): it checks h is fresh, runs
// validate, and only then records h's tick.
func (g *ReplayGuard) AdmitDecoded(h Header, validate func() error) error {
	return g.admit(h, nil, nil, validate, func([]byte, any) error { return nil })
}

func (g *ReplayGuard) admit(h Header, body []byte, v any, validate func() error, unmarshal func([]byte, any) error) error {
	if err := g.Check(h); err != nil {
		return err
	}
	if err := unmarshal(body, v); err != nil {
		return err
	}
	if validate != nil {
		if err := validate(); err != nil {
			return err
		}
	}
	return g.Accept(h)
}
