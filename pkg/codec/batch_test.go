package codec

import (
	"bytes"
	"errors"
	"testing"
)

func TestBatchRoundTrip(t *testing.T) {
	envs := [][]byte{[]byte("a"), bytes.Repeat([]byte{2}, 127), bytes.Repeat([]byte{3}, 128), bytes.Repeat([]byte{4}, 70000)}
	var b []byte
	for _, e := range envs {
		b = AppendBatch(b, e)
	}
	var got [][]byte
	if err := SplitBatch(b, func(e []byte) { got = append(got, e) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(envs) {
		t.Fatalf("%d envelopes, want %d", len(got), len(envs))
	}
	for i := range envs {
		if !bytes.Equal(got[i], envs[i]) {
			t.Errorf("envelope %d differs", i)
		}
	}
	// An envelope never starts with the batch's first byte.
	env, _ := testSealer(t, RoleParty0).Seal(Header{Kind: KindMul, Loop: "l", Tick: 1, From: RoleParty0, To: RoleParty1}, nil)
	if env[0] == BatchMagic {
		t.Fatal("an envelope starts with BatchMagic")
	}
}

func TestBatchRejects(t *testing.T) {
	one := AppendBatch(nil, []byte("env"))
	full := []byte(nil)
	for range MaxBatchEnvelopes + 1 {
		full = AppendBatch(full, []byte("e"))
	}
	for name, c := range map[string]struct {
		in   []byte
		want error
	}{
		"empty":              {nil, ErrMalformed},
		"no envelopes":       {[]byte{BatchMagic}, ErrMalformed},
		"not a batch":        {[]byte("env"), ErrMalformed},
		"an envelope":        {one[2:], ErrMalformed},
		"zero length":        {[]byte{BatchMagic, 0, 'x'}, ErrMalformed},
		"truncated":          {one[:len(one)-1], ErrMalformed},
		"trailing":           {append(bytes.Clone(one), 5), ErrMalformed},
		"bad varint":         {[]byte{BatchMagic, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrMalformed},
		"padded varint":      {[]byte{BatchMagic, 0x81, 0x00, 'x'}, ErrMalformed}, // 1 in two bytes: a second encoding
		"too many envelopes": {full, ErrMalformed},
		"too large":          {make([]byte, MaxEnvelope+1), ErrTooLarge},
	} {
		called := false
		err := SplitBatch(c.in, func([]byte) { called = true })
		if !errors.Is(err, c.want) || called {
			t.Errorf("%s: %v (envelopes delivered: %v), want %v and none", name, err, called, c.want)
		}
	}
}
