package codec

import "fmt"

// Version is the wire format version carried by every envelope.
const Version = 2

// MaxEnvelope bounds every encoded message in bytes: larger input is rejected
// before any decoding, and nothing larger is produced.
const MaxEnvelope = 4 << 20

// MaxLoopID is the longest loop id.
const MaxLoopID = 64

// Header is the public part of an envelope: the broker sees it, and Open
// checks it against the copy sealed with the payload.
type Header struct {
	Version  uint8
	Kind     Kind
	Loop     string
	Tick     uint64
	From, To Role
}

// MaxTick is the largest tick a ReplayGuard admits; a larger one is refused
// as malformed. A loop counts its ticks from 1, 25 a second (1,000 at the
// sensor's shortest period), so it never comes near 2^62; the bound keeps a
// receiver's arithmetic on an admitted tick (the next tick, t+1, an
// actuator's watchdog tick) from wrapping, whatever an authenticated but
// faulty sender puts in the header. (Set-up records and offline items carry
// their epoch, a Unix time in nanoseconds, as their tick; they are opened
// without a ReplayGuard, and 2^62 ns after 1970 is in 2116.)
const MaxTick = 1 << 62

func (h Header) String() string {
	return fmt.Sprintf("%s loop=%s tick=%d %s->%s", h.Kind, h.Loop, h.Tick, h.From, h.To)
}

// ReservedLoopID is the one loop id the subjects reserve: the offline
// queues' subjects are duet.offline.<loop>, so a loop named offline would
// share its subjects (duet.offline.tick, ...) with the queues of the loops
// named tick, out, masky and the like.
const ReservedLoopID = "offline"

// ValidLoopID checks a loop id: 1 to 64 characters from [A-Za-z0-9_-], and
// not ReservedLoopID. Loop ids become NATS subject tokens, so wildcards, dots
// and spaces are excluded.
func ValidLoopID(s string) error {
	if len(s) == 0 || len(s) > MaxLoopID {
		return fmt.Errorf("%w: length %d, want 1 to %d", ErrLoopID, len(s), MaxLoopID)
	}
	if s == ReservedLoopID {
		return fmt.Errorf("%w: %q is reserved (the offline queues' subjects are duet.offline.<loop>)", ErrLoopID, s)
	}
	for i := 0; i < len(s); i++ {
		if !loopChar(s[i]) {
			return fmt.Errorf("%w: %q: byte %d (%q) is not one of [A-Za-z0-9_-]", ErrLoopID, s, i, s[i])
		}
	}
	return nil
}

func validLoopBytes(b []byte) bool {
	if len(b) == 0 || len(b) > MaxLoopID || string(b) == ReservedLoopID {
		return false
	}
	for _, c := range b {
		if !loopChar(c) {
			return false
		}
	}
	return true
}

func loopChar(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// check validates everything in h but the version: kind, roles, loop id and
// route.
func (h Header) check() error {
	switch {
	case !h.Kind.Valid():
		return fmt.Errorf("%w: %d", ErrKind, uint8(h.Kind))
	case !h.From.Valid():
		return fmt.Errorf("%w: sender %d", ErrRole, uint8(h.From))
	case !h.To.Valid():
		return fmt.Errorf("%w: recipient %d", ErrRole, uint8(h.To))
	case !Allowed(h.Kind, h.From, h.To):
		return fmt.Errorf("%w: kind %s may not go from %s to %s", ErrRole, h.Kind, h.From, h.To)
	}
	return ValidLoopID(h.Loop)
}
