package codec

import "runtime"

type testingMem struct{ total uint64 }

func (m *testingMem) read() {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.total = ms.TotalAlloc
}
