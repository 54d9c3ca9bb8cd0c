package bus

import (
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/codec"
)

func TestSubjectLoop(t *testing.T) {
	for _, c := range []struct{ subject, loop string }{
		{MeasureSubject("pend-1", 0), "pend-1"},
		{ExchangeSubject("a", 1), "a"},
		{OutputSubject("b7"), "b7"},
		{TickSubject("c"), "c"},
		{Prefix + ".", ""},
		{"other.a.measure.p0", ""},
		{"duetx.a.measure.p0", ""},
		{"", ""},
	} {
		if got := SubjectLoop(c.subject); got != c.loop {
			t.Errorf("SubjectLoop(%q) = %q, want %q", c.subject, got, c.loop)
		}
	}
}

func TestItemsPerMsg(t *testing.T) {
	for _, c := range []struct{ want, item, limit, got int }{
		{8, 842, MaxOfflineMsg, 8},
		{8, 40 << 10, MaxOfflineMsg, 6},
		{8, 200 << 10, MaxOfflineMsg, 1},
		{8, 2 << 20, MaxOfflineMsg, 1}, // never zero
		{1, 100, MaxOfflineMsg, 1},
		{8, 0, MaxOfflineMsg, 8},
	} {
		if got := ItemsPerMsg(c.want, c.item, c.limit); got != c.got {
			t.Errorf("ItemsPerMsg(%d, %d, %d) = %d, want %d", c.want, c.item, c.limit, got, c.got)
		}
	}
}

// An item over codec.MaxEnvelope, its overhead counted, is refused whatever
// max_payload allows (before, a max_payload raised to 8 MB let a 5-MB item
// through, and every refill then failed), and not told to raise
// max_payload; one over max_payload names it; one within both fits.
func TestItemTooLarge(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		material int
		mp       int64
		want     string // "" fits
	}{
		{1136, mib, ""},
		{mib, mib, ""},
		{mib + 1, mib, "max_payload of 1048576"},
		{5 * mib, 8 * mib, "whatever the NATS server's max_payload"},
		{5 * mib, 0, "whatever the NATS server's max_payload"},
		{5 * mib, mib, "whatever the NATS server's max_payload"},
		{codec.MaxEnvelope - ItemOverhead, 8 * mib, ""},
		{codec.MaxEnvelope - ItemOverhead + 1, 8 * mib, "whatever the NATS server's max_payload"},
		{2 * mib, 0, ""},
	} {
		got := ItemTooLarge(c.material, ItemOverhead, c.mp)
		if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
			t.Errorf("ItemTooLarge(%d, %d) = %q, want %q", c.material, c.mp, got, c.want)
		}
		if c.material > codec.MaxEnvelope && strings.Contains(got, "raise max_payload") {
			t.Errorf("ItemTooLarge(%d, %d) = %q: raising max_payload cannot help", c.material, c.mp, got)
		}
	}
}
