package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/nats-io/nats.go"
)

// The floor's relays in processes of their own (NewFloorRigRelays): when
// the parties run as processes (TickOptions.PartyBin), the floor beside
// them has the same shape, its two relays each a process of the bench's own
// executable, started with relayEnv naming what to relay. cmd/duet (and
// this package's tests) call RelayMain first, which runs such a process as
// the relay.

// relayEnv holds a relay process's relaySpec (JSON).
const relayEnv = "DUET_BENCH_FLOOR_RELAY"

// relaySpec is what one relay process serves.
type relaySpec struct {
	URL    string
	Prefix string
	ID     int
	Sizes  FloorSizes
}

// RelayMain runs this process as one of the floor's relay processes if the
// bench started it as one, until the bench closes its standard input, and
// reports whether it did (the caller then exits). A relay that cannot
// start exits with status 1 and says why on standard error.
func RelayMain() bool {
	v, ok := os.LookupEnv(relayEnv)
	if !ok {
		return false
	}
	if err := runRelay(v, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "duet bench: floor relay:", err)
		os.Exit(1)
	}
	return true
}

func runRelay(spec string, in io.Reader, out io.Writer) error {
	var rs relaySpec
	if err := json.Unmarshal([]byte(spec), &rs); err != nil {
		return fmt.Errorf("%s: %w", relayEnv, err)
	}
	if rs.ID != 0 && rs.ID != 1 {
		return fmt.Errorf("%s: party %d, want 0 or 1", relayEnv, rs.ID)
	}
	nc, err := nats.Connect(rs.URL, nats.Name(fmt.Sprintf("duet-floor-relay-%d", rs.ID)))
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := subscribeRelay(nc, rs.Prefix, rs.ID, rs.Sizes); err != nil {
		return err
	}
	if _, err := fmt.Fprintln(out, "ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in) // until the bench closes it, or dies
	return nil
}

// relayProc is a running relay process.
type relayProc struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   *tailBuffer
	done  chan struct{}
}

// startRelay starts party id's relay as a process of this executable and
// waits until it has subscribed.
func startRelay(url, prefix string, id int, sz FloorSizes) (*relayProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("bench: floor relay: %w", err)
	}
	spec, err := json.Marshal(relaySpec{URL: url, Prefix: prefix, ID: id, Sizes: sz})
	if err != nil {
		return nil, err
	}
	p := &relayProc{cmd: exec.Command(exe), out: &tailBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), relayEnv+"="+string(spec))
	p.cmd.Stderr = p.out
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithBench(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: floor relay %d: %w", id, err)
	}
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("said %q", line)
		}
		ready <- err
		_, _ = io.Copy(io.Discard, stdout)
		_ = p.cmd.Wait()
		close(p.done)
	}()
	select {
	case err = <-ready:
	case <-time.After(30 * time.Second):
		err = errors.New("not ready after 30 s")
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("bench: floor relay %d: %w (%s)", id, err, p.out.String())
	}
	return p, nil
}

// stop ends the process: its input closed, killed if still running 5 s
// later.
func (p *relayProc) stop() {
	_ = p.stdin.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
