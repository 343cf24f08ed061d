package nodes

import (
	"context"
	"sync"
)

// chunkFlights shares one fetch of a chunk among the restores that want
// it at once: a fork's children restoring on one node ask for the same
// chunks together, and without it each would fetch every chunk from the
// object store (8 children: 8 times the bytes, past the store's flow
// control). The zero value is ready.
type chunkFlights struct {
	mu sync.Mutex // guards m
	m  map[string]*chunkFlight
}

type chunkFlight struct {
	done chan struct{}
	b    []byte
	err  error
	// joined counts the callers waiting on this fetch (under
	// chunkFlights.mu).
	joined int
}

// get returns fetch's bytes for key, fetching once for every caller that
// asks while a fetch of key runs. A caller that joined a fetch that
// failed (the first caller's context may have ended) fetches by itself.
func (f *chunkFlights) get(ctx context.Context, key string, fetch func(context.Context) ([]byte, error)) ([]byte, error) {
	f.mu.Lock()
	if fl, ok := f.m[key]; ok {
		fl.joined++
		f.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err == nil {
			return fl.b, nil
		}
		return fetch(ctx)
	}
	if f.m == nil {
		f.m = map[string]*chunkFlight{}
	}
	fl := &chunkFlight{done: make(chan struct{})}
	f.m[key] = fl
	f.mu.Unlock()
	fl.b, fl.err = fetch(ctx)
	f.mu.Lock()
	delete(f.m, key)
	f.mu.Unlock()
	close(fl.done)
	return fl.b, fl.err
}
