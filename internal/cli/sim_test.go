package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/examples"
)

// TestSimOutsideRepository: `duet sim` with its defaults runs from a
// directory without examples/ (the pendulum built into duet) and says so on
// stderr; a spec file of the user's that is missing is still an error.
func TestSimOutsideRepository(t *testing.T) {
	t.Chdir(t.TempDir())
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"sim", "--steps", "20", "--seed", "1"}, &stdout, &stderr); err != nil {
		t.Fatalf("duet sim outside the repository: %v\nstderr: %s", err, stderr.String())
	}
	for _, p := range []string{examples.QubeController, examples.QubePlant} {
		if !strings.Contains(stderr.String(), "no "+p+" here: using the copy built into duet") {
			t.Errorf("stderr does not say %s came from the built-in copy:\n%s", p, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "dimensions     n=3 m=1 p=2") || !strings.Contains(stdout.String(), "ticks          20") {
		t.Errorf("duet sim did not run the pendulum:\n%s", stdout.String())
	}

	stderr.Reset()
	err := Run(context.Background(), []string{"sim", "--steps", "20", "--controller", "mine.json"}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "mine.json") {
		t.Errorf("duet sim --controller mine.json (missing): err %v, want one naming mine.json", err)
	}
	if strings.Contains(stderr.String(), "built into duet") {
		t.Errorf("a missing controller of the user's was replaced by the built-in one:\n%s", stderr.String())
	}
}
