package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
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

// TestSimRefusesBeforeTouchingTheTrace: a bad --steps, a controller that
// cannot be resolved or a plant that does not fit it is refused with an
// error naming the flag or the files, before the trace file is created, so
// an existing trace is kept; a controller rounded onto the grid says by how
// much.
func TestSimRefusesBeforeTouchingTheTrace(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.csv")
	if err := os.WriteFile(trace, []byte("an earlier run\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	outside := write("outside.json", `{"A":[[0.5]],"B":[[1e6]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`)
	oneOut := write("one.json", `{"A":[[0.5]],"B":[[1]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`)
	rounded := write("rounded.json", `{"A":[[0.5]],"B":[[0.3]],"C":[[1]],"D":[[0]],"x0":[0],"k":18,"l":9}`)
	lti := write("lti.json", `{"kind":"lti","A":[[0.5]],"B":[[1]],"C":[[1]]}`)
	qube := filepath.Join("..", "..", examples.QubePlant)
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--steps", "0"}, []string{"--steps 0"}},
		{[]string{"--controller", outside, "--plant", lti}, []string{outside, `field "B"`}},
		{[]string{"--controller", oneOut, "--plant", qube}, []string{oneOut, qube, "p=1"}},
	} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), append([]string{"sim", "--trace", trace}, c.args...), &stdout, &stderr)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("sim %v: err %v, want one naming %q", c.args, err, w)
			}
		}
		if b, _ := os.ReadFile(trace); string(b) != "an earlier run\n" {
			t.Errorf("sim %v changed the trace file before refusing: %q", c.args, b)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"sim", "--steps", "5", "--controller", rounded, "--plant", lti}, &stdout, &stderr); err != nil {
		t.Fatalf("sim with a rounded controller: %v", err)
	}
	if !strings.Contains(stderr.String(), rounded+": entries rounded onto the Q<18,9> grid, the largest by 0.000781\n") {
		t.Errorf("the rounding of 0.3 onto Q<18,9> was not reported:\n%s", stderr.String())
	}
}
