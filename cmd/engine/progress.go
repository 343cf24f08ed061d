package main

import (
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows on stderr, when it is a terminal, how a long command
// goes: bytes for reads and writes (Reader, Writer), a spinner with the
// time taken for an operation the node does in one piece (persist,
// hydrate from a snapshot, resume). It uses schollz/progressbar, a
// well-kept library (rates, sizes, spinners, terminal widths) instead of
// hand-written escape codes. When stderr is not a terminal (scripts,
// tests) it prints nothing and costs nothing.
type progress struct {
	bar  *progressbar.ProgressBar // nil when off
	stop chan struct{}
	wg   sync.WaitGroup
}

// startProgress begins one; bytes says whether it counts bytes (a read or
// a write of unknown size) or only spins while a single operation runs.
func startProgress(stderr io.Writer, what string, bytes bool) *progress {
	p := &progress{}
	if !isTerminal(stderr) {
		return p
	}
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(stderr),
		progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionSetElapsedTime(true),
	}
	if bytes {
		opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionShowCount())
	}
	p.bar = progressbar.NewOptions64(-1, opts...)
	if !bytes {
		// Nothing counts while the node works: tick the spinner.
		p.stop = make(chan struct{})
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			t := time.NewTicker(150 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-p.stop:
					return
				case <-t.C:
					_ = p.bar.Add(0)
				}
			}
		}()
	}
	return p
}

// Reader counts what r gives (a write's content).
func (p *progress) Reader(r io.Reader) io.Reader {
	if p.bar == nil {
		return r
	}
	return io.TeeReader(r, p.bar)
}

// Writer counts what goes to w (a read's content).
func (p *progress) Writer(w io.Writer) io.Writer {
	if p.bar == nil {
		return w
	}
	return io.MultiWriter(w, p.bar)
}

// done ends the spinner and clears the line.
func (p *progress) done() {
	if p.bar == nil {
		return
	}
	if p.stop != nil {
		close(p.stop)
		p.wg.Wait()
	}
	_ = p.bar.Finish()
}
