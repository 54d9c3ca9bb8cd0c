package codec

import (
	"fmt"
	"slices"

	"github.com/duet-mpc/duet/pkg/mpc"
)

// MatrixWire is a matrix over Z_q on the wire: its shape and its entries in
// row-major order, each as f.ByteLen() little-endian bytes (mpc.Field.PutElem).
// The modulus is not carried; both ends know it from the loop's parameters.
type MatrixWire struct {
	Rows uint32 `msgpack:"r"`
	Cols uint32 `msgpack:"c"`
	Data []byte `msgpack:"d"`
}

// PutMatrix encodes m. A matrix whose Data does not hold Rows*Cols entries is
// a programming error and panics.
func PutMatrix(f *mpc.Field, m mpc.Matrix) MatrixWire {
	w, _ := AppendMatrix(f, nil, m)
	return w
}

// AppendMatrix is PutMatrix with the entries appended to buf, for a sender
// that reuses one buffer: the wire's Data aliases the returned buffer, so
// the buffer may be reused only once the wire has been marshalled.
func AppendMatrix(f *mpc.Field, buf []byte, m mpc.Matrix) (MatrixWire, []byte) {
	if m.Rows < 0 || m.Cols < 0 || len(m.Data) != m.Rows*m.Cols || uint64(m.Rows) > 1<<32-1 || uint64(m.Cols) > 1<<32-1 {
		panic(fmt.Sprintf("codec: PutMatrix: %dx%d matrix with %d entries", m.Rows, m.Cols, len(m.Data)))
	}
	bl := f.ByteLen()
	n := len(m.Data) * bl
	if n == 0 {
		// As PutMatrix encodes it, whatever buf is: no entries, nil Data.
		return MatrixWire{Rows: uint32(m.Rows), Cols: uint32(m.Cols)}, buf
	}
	buf = slices.Grow(buf, n)
	start := len(buf)
	buf = buf[:start+n]
	data := buf[start : start+n : start+n]
	for i, e := range m.Data {
		f.PutElem(data[i*bl:], e)
	}
	return MatrixWire{Rows: uint32(m.Rows), Cols: uint32(m.Cols), Data: data}, buf
}

// Empty reports whether w is the 0x0 matrix, with no entries (the S a
// fixed-mask Protocol 1 message carries).
func (w MatrixWire) Empty() bool { return w.Rows == 0 && w.Cols == 0 && len(w.Data) == 0 }

// Decode returns the rows x cols matrix w carries. It fails with ErrDimension
// if w has another shape, ErrMalformed if Data is not rows*cols*f.ByteLen()
// bytes long, and ErrRange if an entry is not below q.
func (w MatrixWire) Decode(f *mpc.Field, rows, cols int) (mpc.Matrix, error) {
	return w.decode(f, rows, cols, "matrix")
}

// decode is Decode with the matrix's name for error messages.
func (w MatrixWire) decode(f *mpc.Field, rows, cols int, name string) (mpc.Matrix, error) {
	if err := w.check(f, rows, cols, name); err != nil {
		return mpc.Matrix{}, err
	}
	m := mpc.NewMatrix(rows, cols)
	if err := w.decodeData(f, m, name); err != nil {
		return mpc.Matrix{}, err
	}
	return m, nil
}

// DecodeInto is Decode into dst, which must already have the expected shape
// and rows*cols entries; it does not allocate. On error dst's entries are
// unspecified.
func (w MatrixWire) DecodeInto(f *mpc.Field, dst mpc.Matrix) error {
	if len(dst.Data) != dst.Rows*dst.Cols {
		return fmt.Errorf("%w: destination %dx%d has %d entries", ErrDimension, dst.Rows, dst.Cols, len(dst.Data))
	}
	return w.decodeInto(f, dst, "matrix")
}

// decodeInto is DecodeInto with the matrix's name for error messages.
func (w MatrixWire) decodeInto(f *mpc.Field, dst mpc.Matrix, name string) error {
	if err := w.check(f, dst.Rows, dst.Cols, name); err != nil {
		return err
	}
	return w.decodeData(f, dst, name)
}

func (w MatrixWire) check(f *mpc.Field, rows, cols int, name string) error {
	if rows < 0 || cols < 0 || uint64(w.Rows) != uint64(rows) || uint64(w.Cols) != uint64(cols) {
		return fmt.Errorf("%w: %s is %dx%d, want %dx%d", ErrDimension, name, w.Rows, w.Cols, rows, cols)
	}
	// rows, cols < 2^32, so the product fits; compare before multiplying by
	// the element width so that nothing overflows.
	n := uint64(rows) * uint64(cols)
	bl := uint64(f.ByteLen())
	if n > uint64(len(w.Data)) || n*bl != uint64(len(w.Data)) {
		return fmt.Errorf("%w: %dx%d %s has %d data bytes, want %d x %d", ErrMalformed, rows, cols, name, len(w.Data), n, bl)
	}
	return nil
}

func (w MatrixWire) decodeData(f *mpc.Field, dst mpc.Matrix, name string) error {
	bl := f.ByteLen()
	for i := range dst.Data {
		e, err := f.ElemFromBytes(w.Data[i*bl : (i+1)*bl])
		if err != nil {
			return fmt.Errorf("%w: entry (%d,%d) of %dx%d %s is not below the modulus %s",
				ErrRange, i/dst.Cols, i%dst.Cols, dst.Rows, dst.Cols, name, f.Name())
		}
		dst.Data[i] = e
	}
	return nil
}
