package metrics

import "testing"

func TestSumBy(t *testing.T) {
	s := New("party")
	s.Abandoned.WithLabelValues("a", "late").Add(3)
	s.Abandoned.WithLabelValues("b", "late").Add(2)
	s.Abandoned.WithLabelValues("b", "no_item").Inc()
	by := SumBy(s.Abandoned, "reason")
	if len(by) != 2 || by["late"] != 5 || by["no_item"] != 1 {
		t.Errorf("by reason: %v, want late 5 and no_item 1", by)
	}
	if by := SumBy(s.Abandoned, "loop"); by["a"] != 3 || by["b"] != 3 {
		t.Errorf("by loop: %v, want a 3 and b 3", by)
	}
	if got := Sum(s.Abandoned); got != 6 {
		t.Errorf("Sum: %v, want 6", got)
	}
	if got := Sum(s.Misses); got != 0 {
		t.Errorf("Sum of an empty vector: %v", got)
	}
}
