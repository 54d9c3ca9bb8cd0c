package party

import (
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// FuzzPubAck: a state write's acknowledgement arrives from the broker.
// parsePubAck never panics, and its direct reader (pubAckSeq) agrees with
// JSON: whatever it takes is valid JSON that decodes to a non-empty stream
// and the same sequence, so the fast path never accepts what the decoder
// would refuse or read differently.
func FuzzPubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"KV_duet-state-party0","seq":42}`,
		`{"stream":"s","seq":18446744073709551615}`,
		`{"stream":"s","seq":0042}`,
		`{"stream":"a\","seq":5}`,
		"{\"stream\":\"a\x01\",\"seq\":5}",
		`{"stream":"s","seq":42,"duplicate":true}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 1"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := parsePubAck(&nats.Msg{Data: data})
		if (r.err == nil) == (r.seq == 0) {
			t.Fatalf("parsePubAck(%q) = %+v: a sequence or an error, not both or neither", data, r)
		}
		seq, ok := pubAckSeq(data)
		if !ok {
			return
		}
		var a jetstream.PubAck
		if err := json.Unmarshal(data, &a); err != nil || a.Stream == "" || a.Sequence != seq {
			t.Fatalf("pubAckSeq(%q) = %d, but JSON reads %+v, %v", data, seq, a, err)
		}
		if r.seq != seq {
			t.Fatalf("parsePubAck(%q) = %+v, pubAckSeq %d", data, r, seq)
		}
	})
}
