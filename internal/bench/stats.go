package bench

import (
	"math"
	"sort"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// Stats summarizes a sample of latencies.
type Stats struct {
	N              int
	Min, Mean, Max time.Duration
	// CILo and CIHi bound a 99% confidence interval of the mean (Student's t
	// with N-1 degrees of freedom; the paper's Fig. 5 draws this band).
	CILo, CIHi time.Duration
	P50, P99   time.Duration
}

// Summarize computes Stats; percentiles are nearest-rank.
func Summarize(d []time.Duration) Stats {
	s := Stats{N: len(d)}
	if len(d) == 0 {
		return s
	}
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	s.Min, s.Max = sorted[0], sorted[len(sorted)-1]
	s.P50, s.P99 = rank(sorted, 0.50), rank(sorted, 0.99)
	var sum float64
	for _, v := range d {
		sum += float64(v)
	}
	mean := sum / float64(len(d))
	s.Mean = time.Duration(mean)
	s.CILo, s.CIHi = s.Mean, s.Mean
	if len(d) > 1 {
		var ss float64
		for _, v := range d {
			ss += (float64(v) - mean) * (float64(v) - mean)
		}
		sd := math.Sqrt(ss / float64(len(d)-1))
		t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(d) - 1)}.Quantile(0.995)
		h := t * sd / math.Sqrt(float64(len(d)))
		s.CILo, s.CIHi = time.Duration(mean-h), time.Duration(mean+h)
	}
	return s
}

// rank is the nearest-rank q-quantile of sorted (ascending).
func rank(sorted []time.Duration, q float64) time.Duration {
	k := int(math.Ceil(q*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

// Percentile is the nearest-rank q-quantile of d.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return rank(sorted, q)
}

// us is a duration in microseconds for tables and CSV files.
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// ratio is a/b, or NaN when b is zero.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
