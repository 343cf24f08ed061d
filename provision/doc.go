// Package provision creates Paddock's streams and buckets (the events
// stream, the workspace bucket, the projection's buckets) with their
// storage limits: the limits an operator asked for, else a default split
// of the JetStream store (storage.Defaults), resolved against what a
// stream already has (storage.Resolve). An engine runs a Plan at start;
// a library user running an engine in-process can too.
//
// It sits above storage, events, objectstore and projector, which know
// nothing of each other's streams; storage itself knows no stream by
// name.
package provision
