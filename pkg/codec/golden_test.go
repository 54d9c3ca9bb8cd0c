package codec

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duet-mpc/duet/pkg/mpc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name (hex), or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(hex.EncodeToString(got)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if want := readGolden(t, name); !bytes.Equal(got, want) {
		t.Errorf("%s changed (wire format break?); run with -update if intended\n got %x\nwant %x", name, got, want)
	}
}

// TestGolden pins wire version 2: a payload and its envelope from fixed keys
// and a fixed nonce. The envelope must also keep opening, and version 1's
// (the same message sealed with XSalsa20-Poly1305) is refused as another
// version.
func TestGolden(t *testing.T) {
	f := testField(t, mpc.PresetM127)
	y := mpc.Matrix{Rows: 2, Cols: 1, Data: []mpc.Elem{f.FromInt64(1), f.FromInt64(-1)}}
	payload, err := Marshal(&MeasurePayload{Y: PutMatrix(f, y), SentUnixNano: 1700000000000000000})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "measure-payload.hex", payload)

	s := testSealer(t, RoleSensor)
	s.rand = bytes.NewReader([]byte("0123456789abcdefghijklmn"))
	h := Header{Version: Version, Kind: KindMeasure, Loop: "golden", Tick: 42, From: RoleSensor, To: RoleParty0}
	env, err := s.Seal(h, payload)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "envelope-v2.hex", env)

	stored := readGolden(t, "envelope-v2.hex")
	gotH, gotP, err := testSealer(t, RoleParty0).Open(stored)
	if err != nil || gotH != h || !bytes.Equal(gotP, payload) {
		t.Fatalf("Open(golden) = %v, %x, %v", gotH, gotP, err)
	}
	var mp MeasurePayload
	if err := Unmarshal(gotP, &mp); err != nil {
		t.Fatal(err)
	}
	if got, err := mp.Y.Decode(f, 2, 1); err != nil || !got.Equal(y) {
		t.Fatalf("golden y = %v, %v", got, err)
	}
	if _, _, err := testSealer(t, RoleParty0).Open(readGolden(t, "envelope-v1.hex")); !errors.Is(err, ErrVersion) {
		t.Errorf("Open(version-1 golden) = %v, want %v", err, ErrVersion)
	}
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := hex.DecodeString(strings.TrimSpace(string(text)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
