package codec

import "errors"

// Sentinel errors. Every rejection of input by this package wraps one of them
// (errors.Is) with detail naming the problem; Reason maps them to metrics
// labels.
var (
	ErrTooLarge      = errors.New("codec: message too large")
	ErrMalformed     = errors.New("codec: malformed message")
	ErrVersion       = errors.New("codec: unsupported wire version")
	ErrKind          = errors.New("codec: unknown message kind")
	ErrRole          = errors.New("codec: invalid role")
	ErrRecipient     = errors.New("codec: message addressed to another role")
	ErrUnknownSender = errors.New("codec: unknown sender")
	ErrAuth          = errors.New("codec: authentication failed")
	ErrHeader        = errors.New("codec: sealed header does not match the envelope")
	ErrDimension     = errors.New("codec: matrix dimension mismatch")
	ErrRange         = errors.New("codec: element not below the modulus")
	ErrReplay        = errors.New("codec: replayed or stale tick")
	ErrLoopID        = errors.New("codec: invalid loop id")
	ErrKey           = errors.New("codec: invalid key")
	// ErrInstance: a message from an instance of a party that another
	// instance of it has replaced (MulPayload.Inc).
	ErrInstance = errors.New("codec: message from a replaced instance of the sender")
	// ErrOtherKey: a service's own record sealed under another of its keys
	// (OpenRecord), as after a key rotation: counted apart from ErrAuth
	// ("other_key"), which alerts as forged input.
	ErrOtherKey = errors.New("codec: record sealed under another key")
)

var reasons = []struct {
	err   error
	label string
}{
	{ErrTooLarge, "too_large"},
	{ErrMalformed, "malformed"},
	{ErrVersion, "version"},
	{ErrKind, "kind"},
	{ErrRole, "role"},
	{ErrRecipient, "recipient"},
	{ErrUnknownSender, "unknown_sender"},
	{ErrAuth, "auth"},
	{ErrHeader, "header"},
	{ErrDimension, "dimension"},
	{ErrRange, "range"},
	{ErrReplay, "replay"},
	{ErrLoopID, "loop_id"},
	{ErrKey, "key"},
	{ErrInstance, "instance"},
	{ErrOtherKey, "other_key"},
}

// Reasons returns every label Reason returns, "other" last.
func Reasons() []string {
	out := make([]string, 0, len(reasons)+1)
	for _, r := range reasons {
		out = append(out, r.label)
	}
	return append(out, "other")
}

// Reason returns a short, fixed label for err's sentinel, suitable as a
// metrics label: "too_large", "malformed", "version", "kind", "role",
// "recipient", "unknown_sender", "auth", "header", "dimension", "range",
// "replay", "loop_id", "key", "instance", "other_key", or "other" for nil and
// anything else.
func Reason(err error) string {
	if err == nil {
		return "other"
	}
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "other"
}
