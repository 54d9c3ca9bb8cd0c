// Package codec is duet's wire format: the sealed envelope every message
// travels in, the MessagePack payloads inside it, replay protection, and the
// role identities that the envelopes are sealed with.
//
// # Threat model
//
// The broker (NATS) is untrusted transport (protocol.md §1): TLS ends there,
// so every payload is end-to-end encrypted and authenticated from its sender
// role to its recipient role: XChaCha20-Poly1305 under the key the two
// roles' X25519 keys share (derived as NaCl box derives it). The
// broker sees only the envelope header (version, kind, loop, tick, sender,
// recipient), which it needs for routing, and may drop, delay, reorder or
// replay envelopes: Open detects tampering, ReplayGuard detects replays,
// and dropping and delaying are the services' problem. Parties are
// semi-honest and do not collude, but they are still not trusted to send
// well-formed data: a role may only send the kinds routed to it (Allowed),
// and every decoder here rejects malformed input with an error, never a
// panic.
//
// # Layers
//
//	Sealer.Seal(Header, Marshal(payload)) -> envelope bytes -> broker
//	broker -> Sealer.Open -> Header, payload bytes -> ReplayGuard.Accept(Header)
//	       -> Unmarshal(payload bytes, &XxxPayload) -> MatrixWire.Decode(f, rows, cols)
//
// Every stage bounds its input by MaxEnvelope, and each rejection wraps one
// of the sentinel errors in errors.go, which Reason turns into a metrics
// label.
//
// pkg/codec imports pkg/mpc for the field and matrix types, never the
// reverse, and knows nothing about NATS.
package codec
