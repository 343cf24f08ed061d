package commands

import (
	"strings"
	"unicode"

	"github.com/paddock-dev/paddock/errcode"
)

// DefaultPrefix is the first token of every Paddock subject.
const DefaultPrefix = "sbx"

// MaxTokenLen bounds tenant, session and node identifiers.
const MaxTokenLen = 128

// CheckToken returns an invalid_request error unless s can stand as one
// subject token: non-empty, at most MaxTokenLen bytes, and free of '.', '*',
// '>', whitespace and control characters, so that no identifier can widen a
// subscription or a permission (a tenant named "a.>" is refused). '/' and
// '\' are refused too: identifiers also name directories and objects.
// what names the field in the error message.
func CheckToken(what, s string) error {
	if s == "" {
		return errcode.New(errcode.InvalidRequest, "%s is empty", what)
	}
	if len(s) > MaxTokenLen {
		return errcode.New(errcode.InvalidRequest, "%s is longer than %d bytes", what, MaxTokenLen)
	}
	for _, r := range s {
		if r == '.' || r == '*' || r == '>' || r == '/' || r == '\\' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return errcode.New(errcode.InvalidRequest, "%s %q contains a character not allowed in a subject token (. * > / \\ whitespace control)", what, s)
		}
	}
	return nil
}

// Subjects builds the command subjects under one prefix.
type Subjects struct {
	Prefix string
}

func (s Subjects) prefix() string {
	if s.Prefix == "" {
		return DefaultPrefix
	}
	return s.Prefix
}

// Create is the subject the scheduler serves for tenant's creates.
func (s Subjects) Create(tenant string) string {
	return s.prefix() + ".cmd." + tenant + ".create"
}

// Lookup is the subject the engine serves to explain why a session did not
// answer (session_not_found or unavailable).
func (s Subjects) Lookup(tenant string) string {
	return s.prefix() + ".cmd." + tenant + ".lookup"
}

// Resume is the subject the scheduler serves to resume a session whose
// node no longer serves it, by placing it anew.
func (s Subjects) Resume(tenant string) string {
	return s.prefix() + ".cmd." + tenant + ".resume"
}

// Delete is the subject the scheduler serves to delete a session no node
// serves (lost, or shut down on a node that is gone).
func (s Subjects) Delete(tenant string) string {
	return s.prefix() + ".cmd." + tenant + ".delete"
}

// DeleteAll matches every tenant's delete subject.
func (s Subjects) DeleteAll() string { return s.prefix() + ".cmd.*.delete" }

// ResumeAll matches every tenant's resume subject.
func (s Subjects) ResumeAll() string { return s.prefix() + ".cmd.*.resume" }

// CreateAll matches every tenant's create subject.
func (s Subjects) CreateAll() string { return s.prefix() + ".cmd.*.create" }

// Diff is the subject the scheduler serves to compare two recorded
// snapshots of a session (OpDiff).
func (s Subjects) Diff(tenant string) string { return s.prefix() + ".cmd." + tenant + ".diff" }

// DiffAll matches every tenant's diff subject.
func (s Subjects) DiffAll() string { return s.prefix() + ".cmd.*.diff" }

// LookupAll matches every tenant's lookup subject.
func (s Subjects) LookupAll() string { return s.prefix() + ".cmd.*.lookup" }

// Upload is the subject the engine serves to open an upload (or discard
// one) for tenant; Download opens a download.
func (s Subjects) Upload(tenant string) string { return s.prefix() + ".cmd." + tenant + ".upload" }

// Download is the subject the engine serves to open a download.
func (s Subjects) Download(tenant string) string { return s.prefix() + ".cmd." + tenant + ".download" }

// UploadAll and DownloadAll match every tenant's upload and download
// subjects.
func (s Subjects) UploadAll() string   { return s.prefix() + ".cmd.*.upload" }
func (s Subjects) DownloadAll() string { return s.prefix() + ".cmd.*.download" }

// Transfer is the subject of one open transfer's chunks: one token after
// the tenant (xfer-<id>), so that it never meets a session's subjects,
// which have two.
func (s Subjects) Transfer(tenant, id string) string {
	return s.prefix() + ".cmd." + tenant + ".xfer-" + id
}

// Session is the subject of op on one session.
func (s Subjects) Session(tenant, session string, op Op) string {
	return s.prefix() + ".cmd." + tenant + "." + session + "." + string(op)
}

// SessionAll matches every op on one session; the owning node subscribes to it.
func (s Subjects) SessionAll(tenant, session string) string {
	return s.prefix() + ".cmd." + tenant + "." + session + ".>"
}

// Node is the subject of a node-directed control op (create, ping).
func (s Subjects) Node(node, op string) string {
	return s.prefix() + ".node." + node + "." + op
}

// Announce is the subject the scheduler publishes on to ask every node to
// send its heartbeat now.
func (s Subjects) Announce() string { return s.prefix() + ".node.announce" }

// Heartbeat is the subject node heartbeats are published on (core NATS).
func (s Subjects) Heartbeat(node string) string { return s.prefix() + ".nodehb." + node }

// HeartbeatAll matches every node's heartbeats.
func (s Subjects) HeartbeatAll() string { return s.prefix() + ".nodehb.*" }

// ParseSession splits a session command subject into tenant, session and op.
// ok is false when subj does not have that shape.
func (s Subjects) ParseSession(subj string) (tenant, session string, op Op, ok bool) {
	rest, found := strings.CutPrefix(subj, s.prefix()+".cmd.")
	if !found {
		return "", "", "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], Op(parts[2]), true
}

// ParseTenant returns the tenant token of a create or lookup subject.
func (s Subjects) ParseTenant(subj string) (string, bool) {
	rest, found := strings.CutPrefix(subj, s.prefix()+".cmd.")
	if !found {
		return "", false
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 2 {
		return "", false
	}
	return parts[0], true
}

// AuditConsumer is the subject on which an auditor asks the engine for its
// events consumer: <prefix>.audit.<auditor>.consumer for an auditor of
// every tenant, <prefix>.audit.<auditor>.<tenant>.consumer for one of
// tenant. The token count tells the two apart, and each auditor's
// permissions allow it its own subject only.
func (s Subjects) AuditConsumer(auditor, tenant string) string {
	if tenant == "" {
		return s.prefix() + ".audit." + auditor + ".consumer"
	}
	return s.prefix() + ".audit." + auditor + "." + tenant + ".consumer"
}

// AuditConsumerAll matches every auditor's consumer subject.
func (s Subjects) AuditConsumerAll() string { return s.prefix() + ".audit.>" }

// ParseAuditConsumer splits an auditor's consumer subject into the
// auditor and its tenant ("" for every tenant); ok is false for any other
// shape.
func (s Subjects) ParseAuditConsumer(subj string) (auditor, tenant string, ok bool) {
	rest, found := strings.CutPrefix(subj, s.prefix()+".audit.")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, ".")
	switch {
	case len(parts) == 2 && parts[1] == "consumer":
		return parts[0], "", true
	case len(parts) == 3 && parts[2] == "consumer":
		return parts[0], parts[1], true
	}
	return "", "", false
}
