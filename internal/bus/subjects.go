// Package bus holds everything the services share about NATS: subject and
// stream names (defined here and nowhere else), connection set-up and the
// JetStream resources of the offline queue.
package bus

import (
	"fmt"
	"strings"

	"github.com/duet-mpc/duet/pkg/codec"
)

// Subjects. Every subject is keyed by the loop id, so one deployment runs
// many loops. Payloads are codec envelopes sealed to their recipient.
//
//	duet.<loop>.measure.p<i>   sensor -> party i        KindMeasure, KindMeasureMasked
//	duet.<loop>.x.p<i>         other party -> party i   KindMul, KindTrunc, KindPreT
//	duet.<loop>.masky          parties -> sensor        KindMaskY (two-hop tick)
//	duet.<loop>.out            parties -> actuator      KindOutput
//	duet.<loop>.tick           sensor -> actuator       KindTick
//	duet.<loop>.plant.y        sensor -> plant (request/reply) KindPlantY
//	duet.<loop>.plant.u        actuator -> plant        KindPlantU
//	duet.offline.<loop>        dealers -> stream DUET_OFFLINE_<loop>
//	duet.~batch.x.p<i>         other party -> party i   batches of KindMul, KindTrunc, KindPreT
//
// The batch subject's second token is not a loop id ('~' is outside the loop
// id alphabet), so it never meets a loop's subjects, and it is inside the
// exchange permissions (duet.*.x.p<i>) the parties already have.
const Prefix = "duet"

// BatchToken is the batch subject's second token.
const BatchToken = "~batch"

// BatchSubject carries batches of the other party's messages, of any
// loops, to party `to` (codec.AppendBatch).
func BatchSubject(to int) string { return fmt.Sprintf("%s.%s.x.p%d", Prefix, BatchToken, to) }

// MeasureSubject carries the share of y_t for party i.
func MeasureSubject(loop string, party int) string {
	return fmt.Sprintf("%s.%s.measure.p%d", Prefix, loop, party)
}

// ExchangeSubject carries the other party's messages to party `to`.
func ExchangeSubject(loop string, to int) string {
	return fmt.Sprintf("%s.%s.x.p%d", Prefix, loop, to)
}

// PartyInbox matches both subjects party i reads (measure and exchange).
func PartyInbox(loop string, party int) string {
	return fmt.Sprintf("%s.%s.*.p%d", Prefix, loop, party)
}

// MaskYSubject carries the parties' shares of the next tick's measurement
// mask to the sensor (the two-hop tick).
func MaskYSubject(loop string) string { return Prefix + "." + loop + ".masky" }

// TwoHopProbe: parties that have backed off from the two-hop tick send
// their mask shares only after ticks that are multiples of it, and a Fast
// sensor that has given up waiting for them waits only after those ticks,
// so that the two probes meet (one constant for both sides).
const TwoHopProbe = 25

// OutputSubject carries output shares to the actuator.
func OutputSubject(loop string) string { return Prefix + "." + loop + ".out" }

// TickSubject carries the sensor's tick notices to the actuator.
func TickSubject(loop string) string { return Prefix + "." + loop + ".tick" }

// PlantYSubject is the plant's measurement request subject.
func PlantYSubject(loop string) string { return Prefix + "." + loop + ".plant.y" }

// PlantUSubject carries applied inputs to the plant.
func PlantUSubject(loop string) string { return Prefix + "." + loop + ".plant.u" }

// OfflineSubject is where dealers publish a loop's items.
func OfflineSubject(loop string) string { return Prefix + ".offline." + loop }

// OfflineStream names a loop's offline queue stream.
func OfflineStream(loop string) string { return "DUET_OFFLINE_" + loop }

// ConsumerName is party i's durable consumer on a loop's offline stream.
func ConsumerName(party int) string { return fmt.Sprintf("party%d", party) }

// SetupBucket is the JetStream KV bucket holding each loop's sealed set-up
// records; the sensor writes them, each record is sealed to its reader.
const SetupBucket = "duet-setup"

// SetupKey names the set-up record of a loop for one role.
func SetupKey(loop string, r codec.Role) string { return loop + "." + r.String() }

// DealerSetupWildcard matches every loop's dealer record.
const DealerSetupWildcard = "*.dealer"

// SetupStream is the set-up bucket's JetStream stream.
const SetupStream = "KV_" + SetupBucket

// setupSubjectPrefix starts the subject of every record of the set-up
// bucket: the prefix and the record's key.
const setupSubjectPrefix = "$KV." + SetupBucket + "."

// DealerSetupFilter is the subject filter of the dealer records alone, the
// only filter the dealers may watch the set-up bucket's stream with
// (internal/acl).
const DealerSetupFilter = setupSubjectPrefix + DealerSetupWildcard

// SetupKeyOf is the key of the set-up record stored under subject, and
// false for a subject outside the set-up bucket.
func SetupKeyOf(subject string) (string, bool) {
	return strings.CutPrefix(subject, setupSubjectPrefix)
}

// SubjectLoop returns the loop id of a per-loop subject (Prefix.<loop>...),
// or "" if subject is not one.
func SubjectLoop(subject string) string {
	rest, ok := strings.CutPrefix(subject, Prefix+".")
	if !ok {
		return ""
	}
	loop, _, _ := strings.Cut(rest, ".")
	return loop
}

// MaxOfflineMsg bounds a stream message of several offline items (the
// server's max_payload, 1 MiB by default, bounds it too).
const MaxOfflineMsg = 256 << 10

// ItemsPerMsg is how many items of itemBytes each one offline stream message
// holds when want are asked for: fewer for large items, so that a message
// stays within limit bytes (MaxOfflineMsg, or less), and at least one. The
// sensor sizes the queue with it from the item's estimated size, the dealer
// checks it against the real one.
func ItemsPerMsg(want, itemBytes, limit int) int {
	return max(1, min(want, limit/max(1, itemBytes)))
}

// ItemTooLarge says why an offline item of material bytes cannot travel, or
// returns "" when it can. One stream message holds one item at the least; the
// NATS server refuses a message over its max_payload (mp, 0 when unknown),
// and every duet service refuses one over codec.MaxEnvelope (4 MiB), a bound
// that raising max_payload does not lift. Against max_payload the material
// alone is checked (the overhead is an upper bound, and an item just over
// it is refused by the server, which the dealers log); against MaxEnvelope,
// which nothing would report, the material with its overhead (overhead: an
// upper bound of an item's bytes beyond its material).
func ItemTooLarge(material, overhead int, mp int64) string {
	const remedy = "use seed compression (DUET_COMPRESS) or a smaller controller"
	if material+overhead > codec.MaxEnvelope {
		return fmt.Sprintf("an offline item holds %d bytes of material, over the %d bytes a duet service takes in one message with the item's own (up to %d), whatever the NATS server's max_payload: %s", material, codec.MaxEnvelope, overhead, remedy)
	}
	if mp > 0 && int64(material) > mp {
		return fmt.Sprintf("an offline item holds %d bytes of material, over the NATS server's max_payload of %d: raise max_payload (duet takes up to %d bytes), %s", material, mp, codec.MaxEnvelope, remedy)
	}
	return ""
}

// ItemOverhead bounds an offline item's bytes beyond its material: two
// sealed envelopes' headers and tags, the item's loop, epoch and nonce.
const ItemOverhead = 512
