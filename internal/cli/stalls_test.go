package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestStalls(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := Run(context.Background(), []string{"stalls", "--for", "50ms", "--over", "1h"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.HasPrefix(s, "0 stalls over 1h0m0s in ") || !strings.Contains(s, "the worst") {
		t.Errorf("output %q", s)
	}
	for _, args := range [][]string{{"--for", "0s"}, {"--over", "-1ms"}, {"--for", "x"}, {"extra"}} {
		err := Run(context.Background(), append([]string{"stalls"}, args...), &out, &errOut)
		if !errors.Is(err, ErrUsage) {
			t.Errorf("stalls %v: %v, want a usage error", args, err)
		}
	}
}
