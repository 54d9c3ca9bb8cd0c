// Package testlog is a log sink for tests whose services log from their own
// goroutines while the test reads what was logged.
package testlog

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that its writers and readers may share.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is what was written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
