package commands

import (
	"time"

	"github.com/paddock-dev/paddock/errcode"
)

// AuditConsumerArgs ask the engine for an auditor's events consumer (on
// Subjects.AuditConsumer): a pull consumer named for the auditor, reading
// Filter from a start position. An auditor's permissions allow it no
// consumer create of its own, whose body could name a deliver subject.
type AuditConsumerArgs struct {
	// Filter is the subject filter, within what the auditor may read: its
	// tenant's session events (or every tenant's) or the node events.
	Filter string `json:"filter"`
	// StartSeq or StartTime say where the consumer begins (default: the
	// first event).
	StartSeq  uint64     `json:"start_seq,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
	// Durable asks for a consumer that stays and takes acknowledgements
	// (engine events tail --durable); otherwise it acknowledges nothing and
	// goes by itself a minute after its reader stops.
	Durable bool `json:"durable,omitempty"`
	// Stream is the partition's stream the consumer is on (empty: the
	// first events stream, the only one of an unpartitioned deployment).
	// The engine refuses a stream that is not one of its partitions, and a
	// filter beyond what the auditor may read in that partition.
	Stream string `json:"stream,omitempty"`
}

// Validate checks the arguments' shape; the engine checks the filter
// against the auditor.
func (a *AuditConsumerArgs) Validate() error {
	if a.Filter == "" {
		return errcode.New(errcode.InvalidRequest, "filter is empty")
	}
	if len(a.Filter) > 512 {
		return errcode.New(errcode.InvalidRequest, "filter is longer than 512 bytes")
	}
	return nil
}

// AuditConsumerResult names the consumer the engine made.
type AuditConsumerResult struct {
	Consumer string `json:"consumer"`
}
