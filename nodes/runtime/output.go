package runtime

// CappedBuffer is an io.Writer that keeps the first Max bytes written to it
// and counts all of them. It never fails, so a command that floods its
// output is never blocked or killed by the capture. Not safe for concurrent
// use.
type CappedBuffer struct {
	Max   int
	buf   []byte
	total int64
}

// Write keeps what fits under Max and counts everything.
func (b *CappedBuffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := b.Max - len(b.buf); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		b.buf = append(b.buf, p[:room]...)
	}
	return len(p), nil
}

// Bytes returns the kept bytes.
func (b *CappedBuffer) Bytes() []byte { return b.buf }

// Total returns how many bytes were written in all.
func (b *CappedBuffer) Total() int64 { return b.total }

// Truncated reports whether more was written than kept.
func (b *CappedBuffer) Truncated() bool { return b.total > int64(len(b.buf)) }
