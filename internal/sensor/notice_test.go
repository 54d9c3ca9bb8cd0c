package sensor

import (
	"testing"
	"time"
)

// The tick notice waits DefaultNoticeDelay in real time, a quarter of a
// shorter period, nothing with Fast, and what it is told otherwise.
func TestNoticeDelay(t *testing.T) {
	for _, c := range []struct {
		opt  Options
		want time.Duration
	}{
		{Options{Period: 40 * time.Millisecond}, DefaultNoticeDelay},
		{Options{Period: 8 * time.Millisecond}, 2 * time.Millisecond},
		{Options{Period: 40 * time.Millisecond, Fast: true}, 0},
		{Options{Period: 40 * time.Millisecond, Fast: true, NoticeDelay: 2 * time.Millisecond}, 2 * time.Millisecond},
		{Options{Period: 40 * time.Millisecond, NoticeDelay: 12 * time.Millisecond}, 12 * time.Millisecond},
		{Options{Period: 40 * time.Millisecond, NoticeDelay: -1}, 0},
	} {
		if got := c.opt.noticeDelay(); got != c.want {
			t.Errorf("%+v: notice delay %v, want %v", c.opt, got, c.want)
		}
	}
}
