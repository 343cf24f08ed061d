// Package readiness waits for JetStream, and for a stream of it, to be
// able to serve: a cluster that has just formed, lost a server or got one
// back elects its meta leader and each stream's leader again within
// seconds, and meanwhile requests time out, find no responders, or are
// refused with "cluster not ready" codes.
//
// Transient says which failures pass by themselves; StreamReady asks
// whether a stream has a leader with a quorum; Retry runs a reader until
// it succeeds, fails for good, or has waited long enough, and says what
// it waited for; RetryTransient runs a setup step (creating streams and
// buckets) again until the caller's context ends. The CLI's readers and
// the engine's start use them; a library user reading Paddock's streams
// on a cluster can too.
package readiness
