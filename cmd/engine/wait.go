package main

import (
	"time"

	flag "github.com/spf13/pflag"
)

// defaultWait is how long the CLI's readers wait for JetStream and the
// stream they read to be ready (--wait): a cluster elects a stream's
// leader again within seconds of losing or getting back a server.
const defaultWait = 30 * time.Second

// waitFlag adds --wait to a reader's flag set.
func waitFlag(fs *flag.FlagSet, also string) *time.Duration {
	return fs.Duration("wait", defaultWait, "how long to wait for JetStream and the stream read to be ready (a cluster electing a leader)"+also)
}

// projectionTry bounds one try of a read of a projection bucket: a watch
// made while the bucket's stream settles can wait for its consumer for a
// minute (the client's timeout) where a new try would succeed.
const projectionTry = 30 * time.Second
