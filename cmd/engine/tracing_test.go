package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/paddock-dev/paddock/testenv"
)

// collector is an in-process OTLP/HTTP trace receiver: it keeps every
// span it is sent, by name.
type collector struct {
	mu    sync.Mutex
	spans map[string][]otlpSpan
}

type otlpSpan struct{ trace, id, parent string }

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil && r.URL.Path == "/v1/traces" {
		err = proto.Unmarshal(body, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, fmt.Sprintf("bad export to %s: %v", r.URL.Path, err), http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans[s.Name] = append(c.spans[s.Name], otlpSpan{hex.EncodeToString(s.TraceId), hex.EncodeToString(s.SpanId), hex.EncodeToString(s.ParentSpanId)})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *collector) get(name string) []otlpSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]otlpSpan(nil), c.spans[name]...)
}

// TestServeExportsTraces: `engine serve --otlp-endpoint` exports the
// scheduler's and the node's spans over OTLP/HTTP, a create's in one
// trace scheduler → node → runtime.
func TestServeExportsTraces(t *testing.T) {
	col := &collector{spans: map[string][]otlpSpan{}}
	srv := httptest.NewServer(col)
	t.Cleanup(srv.Close)
	logs, stop := serveStoppable(t, "--state-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--node-id", "n1", "--runtime", "local", "--otlp-endpoint", srv.URL)
	m := regexp.MustCompile(`paddock engine ready" nats=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no listener URL in the log:\n%s", logs.String())
	}
	id := strings.TrimSpace(mustCLI(t, m[1], "", "sandbox", "create"))
	mustCLI(t, m[1], "", "sandbox", "exec", id, "--", "true")
	stop() // flushes the batch of spans not yet exported
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, name := range []string{"paddock.scheduler create", "paddock.node create", "paddock.runtime create", "paddock.node exec", "paddock.runtime exec"} {
			if len(col.get(name)) == 0 {
				return fmt.Errorf("no span %q exported yet", name)
			}
		}
		return nil
	})
	sch, node, rt := col.get("paddock.scheduler create")[0], col.get("paddock.node create")[0], col.get("paddock.runtime create")[0]
	if node.trace != sch.trace || node.parent != sch.id || rt.trace != sch.trace || rt.parent != node.id {
		t.Errorf("create spans scheduler %+v, node %+v, runtime %+v: want one trace, each the parent of the next", sch, node, rt)
	}
}
