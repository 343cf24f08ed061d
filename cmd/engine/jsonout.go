package main

import (
	"encoding/json"
	"io"
	"unicode/utf8"
)

// The --json shapes of the commands that have no result of their own
// (docs/cli.md lists each command's).

// statusResult is what a lifecycle command did to a session.
type statusResult struct {
	Session string `json:"session_id"`
	Status  string `json:"status"`
}

// doneStatus is the status word of each lifecycle command's result.
var doneStatus = map[string]string{"start": "started", "stop": "stopped", "shutdown": "shut_down", "delete": "deleted"}

// pathResult is what rm or mkdir did to a path.
type pathResult struct {
	Session string `json:"session_id"`
	Path    string `json:"path"`
	Status  string `json:"status"`
}

// readResult is a file read with --json: its content base64 (JSON's
// encoding of []byte), as a file may hold any bytes.
type readResult struct {
	Session string `json:"session_id"`
	Path    string `json:"path"`
	Bytes   int64  `json:"bytes"`
	Content []byte `json:"content_base64"`
}

// chunk is one line of a stream's output with --json: stdout or stderr
// bytes, as text when they are UTF-8, else base64.
type chunk struct {
	Stream string `json:"stream"`
	Data   string `json:"data,omitempty"`
	Base64 []byte `json:"data_base64,omitempty"`
}

func outputChunk(stderr bool, p []byte) chunk {
	c := chunk{Stream: "stdout"}
	if stderr {
		c.Stream = "stderr"
	}
	if utf8.Valid(p) {
		c.Data = string(p)
	} else {
		c.Base64 = append([]byte(nil), p...)
	}
	return c
}

// printJSONLine writes v as one line of JSON (JSON lines, for streams).
func printJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// deletedSnapshots is what snapshot rm deleted (bytes: when it knows).
type deletedSnapshots struct {
	Deleted int    `json:"deleted"`
	Bytes   *int64 `json:"bytes,omitempty"`
}

// imageResult is the image a build made.
type imageResult struct {
	Tag string `json:"tag"`
}

// logLine is a log line of nats-server --json.
type logLine struct {
	Time  string `json:"time"`
	Level string `json:"level"`
	Msg   string `json:"msg"`
}

// statusSummary is cluster wait's result.
type statusSummary struct {
	Status  string `json:"status"`
	Summary string `json:"summary"`
}

// clusterConfigResult is what cluster config wrote, and the client URLs
// of the servers.
type clusterConfigResult struct {
	Out   string   `json:"out"`
	Files []string `json:"files"`
	URLs  []string `json:"urls"`
}
