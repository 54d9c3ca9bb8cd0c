package mpc_test

import (
	"fmt"
	"io"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// rng is a seeded reader, so the examples replay exactly. Production code
// passes crypto/rand, or a PRG keyed from it.
func rng() io.Reader { return mpc.NewPRG([32]byte{'e', 'x'}, [16]byte{}) }

func ExampleParseModulus() {
	f, err := mpc.ParseModulus("2^127-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(f.Name(), f.BitLen(), f.ByteLen())

	g, _ := mpc.ParseModulus("65535") // any odd modulus 3 <= q < 2^255
	fmt.Println(g.Name(), g.String(g.Sub(g.Zero(), g.One())))

	_, err = mpc.ParseModulus("1024")
	fmt.Println(err)
	_, err = mpc.ParseModulus("12a5")
	fmt.Println(err)
	// Output:
	// 2^127-1 127 16
	// 65535 -1
	// mpc: modulus must be odd: 1024 is even (2^l must be invertible mod q)
	// mpc: invalid modulus: "12a5": character 2 ('a') is not a decimal digit; use a decimal integer or "2^127-1" or "2^255-19"
}

// Fixed point: Q<18,9> holds 2^-9 z for z in Z<18>, so [-256, 256 - 2^-9].
// Encoding rounds to the grid with round(x) = floor(x + 1/2).
func ExampleEncodeInt() {
	for _, x := range []float64{1.25, 0.0009765625, -0.0009765625, -256} {
		z, _ := mpc.EncodeInt(x, 18, 9)
		fmt.Println(x, "->", z)
	}
	_, err := mpc.EncodeInt(256, 18, 9)
	fmt.Println(err)
	// Output:
	// 1.25 -> 640
	// 0.0009765625 -> 1
	// -0.0009765625 -> 0
	// -256 -> -131072
	// mpc: value out of range: 256 is outside Q<18,9> = [-256, 255.998046875]
}

// Z_q is read as centered integers: q-1 stands for -1.
func ExampleField_RoundShift() {
	f, _ := mpc.ParseModulus(mpc.PresetP25519)
	for _, v := range []int64{5, -5, 6, -6, 1023} {
		fmt.Printf("round(%d / 2) = %s, round(%d / 4) = %s\n",
			v, f.String(f.RoundShift(f.FromInt64(v), 1)), v, f.String(f.RoundShift(f.FromInt64(v), 2)))
	}
	// Output:
	// round(5 / 2) = 3, round(5 / 4) = 1
	// round(-5 / 2) = -2, round(-5 / 4) = -1
	// round(6 / 2) = 3, round(6 / 4) = 2
	// round(-6 / 2) = -3, round(-6 / 4) = -1
	// round(1023 / 2) = 512, round(1023 / 4) = 256
}

// Share a vector between two parties; each share alone is uniform, the two
// together give the vector back.
func ExampleField_Share() {
	f, _ := mpc.ParseModulus(mpc.PresetM127)
	x := mpc.NewMatrix(3, 1)
	for i, v := range []int64{3, -4, 0} {
		x.Data[i] = f.FromInt64(v)
	}
	s0, s1, err := f.Share(rng(), x)
	if err != nil {
		panic(err)
	}
	y := f.ReconstNew(s0, s1)
	fmt.Println(f.String(y.Data[0]), f.String(y.Data[1]), f.String(y.Data[2]))
	// Output:
	// 3 -4 0
}

// Protocol 1: the parties multiply a shared matrix by a shared vector with
// one exchange, using a dealer's matrix triple.
func ExampleField_MulClose() {
	f, _ := mpc.ParseModulus(mpc.PresetM127)
	r := rng()
	enc := func(rows, cols int, v ...int64) mpc.Matrix {
		m := mpc.NewMatrix(rows, cols)
		for i := range v {
			m.Data[i] = f.FromInt64(v[i])
		}
		return m
	}
	x0, x1, _ := f.Share(r, enc(2, 2, 1, 2, 3, -4))
	y0, y1, _ := f.Share(r, enc(2, 1, 5, 6))
	t0, t1, _ := f.GenTriple(r, r, 2, 2, 1) // the dealer

	// Step 1: each party opens X - U and Y - V; both reconstruct S and T.
	s, t := mpc.NewMatrix(2, 2), mpc.NewMatrix(2, 1)
	sa, sb, ta, tb := mpc.NewMatrix(2, 2), mpc.NewMatrix(2, 2), mpc.NewMatrix(2, 1), mpc.NewMatrix(2, 1)
	f.MulOpen(sa, x0, t0.U)
	f.MulOpen(ta, y0, t0.V)
	f.MulOpen(sb, x1, t1.U)
	f.MulOpen(tb, y1, t1.V)
	f.Reconst(s, sa, sb)
	f.Reconst(t, ta, tb)
	// Step 2: local.
	z0, z1 := mpc.NewMatrix(2, 1), mpc.NewMatrix(2, 1)
	f.MulClose(z0, 0, s, t, t0, t0.U, mpc.NewMatrix(2, 1))
	f.MulClose(z1, 1, s, t, t1, t1.U, mpc.NewMatrix(2, 1))

	z := f.ReconstNew(z0, z1)
	fmt.Println(f.String(z.Data[0]), f.String(z.Data[1]))
	// Output:
	// 17 -9
}

// Protocol 2: truncation by 2^l of a shared value. The result is
// round(X / 2^l) up to an error W in {-1, 0, 1}.
func ExampleField_TruncClose() {
	f, _ := mpc.ParseModulus(mpc.PresetM127)
	const l, lambda = 9, 40
	kappa := f.BitLen() - 2 - lambda
	r := rng()
	x := mpc.NewMatrix(1, 1)
	x.Data[0] = f.FromInt64(-1234567)
	x0, x1, _ := f.Share(r, x)
	m0, m1, _ := f.GenMask(r, r, 1, 1, kappa, l, lambda) // the dealer

	y0, y1 := mpc.NewMatrix(1, 1), mpc.NewMatrix(1, 1)
	f.TruncOpen(y0, 0, x0, m0, l) // P0 sends y0 to P1
	f.TruncOpen(y1, 1, x1, m1, l)
	y := f.ReconstNew(y0, y1)
	inv := f.InvPow2(l)
	f.TruncClose(x0, 0, x0, mpc.Matrix{}, m0, l, inv)
	f.TruncClose(x1, 1, x1, y, m1, l, inv)

	z, _ := f.Int64(f.ReconstNew(x0, x1).Data[0])
	exact, _ := f.Int64(f.RoundShift(x.Data[0], l))
	fmt.Println("round(X / 2^9) =", exact)
	fmt.Println("|Z - round(X / 2^9)| <= 1:", z-exact >= -1 && z-exact <= 1)
	// Output:
	// round(X / 2^9) = -2411
	// |Z - round(X / 2^9)| <= 1: true
}

// The whole two-party controller in one process: the pendulum controller of
// protocol.md §8 fed a few measurements (degrees). u = Dcd(ū, 2l) is the
// motor voltage.
func ExampleLocalLoop() {
	f, _ := mpc.ParseModulus(mpc.PresetM127)
	prm := mpc.Params{Field: f, N: 3, M: 1, P: 2, K: 18, L: 9, Lambda: 40, Variant: mpc.FixedMask}
	k := []float64{264.0 / 512, -549.0 / 512, 5.0 / 512, -6.0 / 512, -431.0 / 512}
	phi, err := f.EcdMatrix([][]float64{
		{0, 0, 0, -50, 0},
		{0, 0, 0, 0, -50},
		{k[2], k[3], k[4], k[0], k[1]},
		{k[2], k[3], k[4], k[0], k[1]},
	}, prm.K, prm.L)
	if err != nil {
		panic(err)
	}
	loop, err := mpc.NewLocalLoop(prm, phi, mpc.NewMatrix(3, 1), rng(), mpc.NewSession([32]byte{1}), true)
	if err != nil {
		panic(err)
	}
	for _, y := range [][]float64{{0, 2}, {0.5, 1}, {1, -0.5}} {
		u, err := loop.Step(y)
		if err != nil {
			panic(err)
		}
		fmt.Printf("y = %v: u = %.2f V\n", y, u[0])
	}
	// Output:
	// y = [0 2]: u = -2.14 V
	// y = [0.5 1]: u = 2.16 V
	// y = [1 -0.5]: u = -0.43 V
}
