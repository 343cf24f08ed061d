package main

import (
	"fmt"

	flag "github.com/spf13/pflag"

	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/storage"
)

// storageFlags are `engine serve`'s storage settings: the embedded
// server's store and the limits of Paddock's streams.
type storageFlags struct {
	maxStore, events, objects, kv string
	dropOldest                    bool
}

func (f *storageFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.maxStore, "max-store", "", "the embedded server's JetStream store, e.g. 100g (default: nats-server's, 75% of the disk's free space at start)")
	fs.StringVar(&f.events, "events-max-bytes", "", fmt.Sprintf("space reserved for the events stream, e.g. 10g (default: %d%% of the JetStream store)", storage.EventsPercent))
	fs.BoolVar(&f.dropOldest, "events-drop-oldest", false, "when the events stream is full, drop its oldest events (retention) instead of refusing new ones")
	fs.StringVar(&f.objects, "objects-max-bytes", "", fmt.Sprintf("quota of the workspace bucket (snapshots, transfers), e.g. 50g (default: %d%% of the JetStream store)", storage.ObjectsPercent))
	fs.StringVar(&f.kv, "kv-max-bytes", "", fmt.Sprintf("bound of each projection bucket, e.g. 1g (default: %d%% of the JetStream store)", storage.KVPercent))
}

// parse returns the embedded store's size and the limits asked (0: none).
func (f *storageFlags) parse() (int64, storage.Limits, error) {
	var out [4]int64
	for i, v := range []struct{ flag, val string }{{"max-store", f.maxStore}, {"events-max-bytes", f.events}, {"objects-max-bytes", f.objects}, {"kv-max-bytes", f.kv}} {
		if v.val == "" {
			continue
		}
		n, err := bytesize.Parse(v.val)
		if err != nil {
			return 0, storage.Limits{}, err
		}
		if n == 0 {
			return 0, storage.Limits{}, usageErr("--%s 0: give a size, or leave the flag out for the default", v.flag)
		}
		out[i] = n
	}
	return out[0], storage.Limits{Events: out[1], Objects: out[2], KV: out[3]}, nil
}
