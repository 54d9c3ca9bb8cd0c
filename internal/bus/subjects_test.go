package bus

import "testing"

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
