package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/paddock-dev/paddock/events"
)

// TailEvent is what the live tail sends for each event (an SSE "data"
// line of JSON).
type TailEvent struct {
	StreamSeq  uint64   `json:"stream_seq"`
	Seq        uint64   `json:"seq,omitempty"`
	TS         string   `json:"ts,omitempty"`
	Op         string   `json:"op,omitempty"`
	Phase      string   `json:"phase,omitempty"`
	OK         *bool    `json:"ok,omitempty"`
	DurationMS *float64 `json:"duration_ms,omitempty"`
	ExitCode   *int     `json:"exit_code,omitempty"`
	ErrorCode  string   `json:"error_code,omitempty"`
	Error      string   `json:"error,omitempty"`
}

// tail streams a session's new events as server-sent events after stream
// seq ?after (or the Last-Event-ID of a reconnecting browser), until the client goes, the tail's bound passes or the
// console closes. At most Config.MaxTails run at once (503 beyond).
func (h *Handler) tail(w http.ResponseWriter, r *http.Request, v Viewer) {
	tenant, id := r.PathValue("tenant"), r.PathValue("id")
	if err := checkSession(v, tenant, id); err != nil {
		http.Error(w, err.Error(), statusOf(err))
		return
	}
	var after uint64
	// A browser's EventSource that reconnects says where it was
	// (Last-Event-ID, the id of the last event it got): it goes on from
	// there rather than from the page's ?after.
	s := r.Header.Get("Last-Event-ID")
	if s == "" {
		s = r.URL.Query().Get("after")
	}
	if s != "" {
		var err error
		if after, err = strconv.ParseUint(s, 10, 64); err != nil {
			http.Error(w, "after is not a stream sequence", http.StatusBadRequest)
			return
		}
	}
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	select {
	case h.tails <- struct{}{}:
		defer func() { <-h.tails }()
	default:
		http.Error(w, "too many live tails", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.TailFor)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": tail\n\n")
	fl.Flush()
	err := h.r.Tail(ctx, v, tenant, id, after, func(m events.Msg) error {
		te := TailEvent{StreamSeq: m.StreamSeq}
		if ev, err := m.Decode(); err != nil {
			te.Error = err.Error()
		} else {
			te.Seq, te.TS, te.Op, te.Phase = ev.Seq, ev.TS.UTC().Format(time.RFC3339Nano), ev.Op, string(ev.Phase)
			te.OK, te.DurationMS, te.ExitCode, te.ErrorCode = ev.OK, ev.DurationMS, ev.ExitCode, ev.ErrorCode
		}
		b, err := json.Marshal(te)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: %s\n\n", m.StreamSeq, b); err != nil {
			return err
		}
		fl.Flush()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		h.logger.Warn("console: tail", "tenant", tenant, "session", id, "err", err)
	}
}
