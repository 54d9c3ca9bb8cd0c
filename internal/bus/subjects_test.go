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
