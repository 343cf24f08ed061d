// Package audit checks the event stream's promises session by session,
// from the stored bytes: the prev_hash chain (each event carries the
// sha256 of its session's previous stored event, so an altered, inserted
// or removed event breaks it), a gap-free seq starting at 1, and exactly
// one finish for every start, paired by span. Operations that started and
// have not finished are reported as open, which is not a failure by
// itself (they may be running).
//
// The Checker is pure: feed it the stream's messages in stream order
// (engine audit verify reads them with an ordered consumer) and read its
// Report.
package audit
