package auth

import (
	"fmt"

	"github.com/paddock-dev/paddock/commands"
)

// The names the permissions are written against. They are the defaults of
// the events, objectstore and projector packages (auth does not import
// those, to stay below them); TestNamesMatch keeps them equal.
const (
	subjectPrefix  = "sbx"
	eventsStream   = "SBX_EVENTS"
	workspacesObj  = "sbx_workspaces"
	sessionsBucket = "sbx_sessions"
	nodesBucket    = "sbx_nodes"
	stateBucket    = "sbx_projector"
	// maxPartitions is events.MaxPartitions: the permissions name the
	// stream of every partition a deployment may have (a stream name is one
	// token of an API subject, so no wildcard could name them alone).
	maxPartitions = 16
)

// eventStreams are the streams of every event partition: SBX_EVENTS, then
// SBX_EVENTS_1 .. SBX_EVENTS_<maxPartitions-1> (events.PartitionStream).
func eventStreams() []string {
	out := []string{eventsStream}
	for k := 1; k < maxPartitions; k++ {
		out = append(out, fmt.Sprintf("%s_%d", eventsStream, k))
	}
	return out
}

// SubjectPermission is an allow and a deny list of subjects, as nats-server
// takes them.
type SubjectPermission struct {
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
}

// Permissions is what one identity may publish and subscribe to. A nil
// Permissions means everything within its account.
type Permissions struct {
	Publish   *SubjectPermission `json:"publish,omitempty"`
	Subscribe *SubjectPermission `json:"subscribe,omitempty"`
	// AllowResponses lets a service answer a request it received (one
	// reply, on the request's reply subject) without publish rights there.
	AllowResponses bool `json:"allow_responses,omitempty"`
}

// PermissionsOf returns the identity's permissions: nil (everything in the
// PADDOCK account) for the engine and admins, and the table in
// docs/security.md for the others.
func PermissionsOf(id Identity) *Permissions {
	inbox := id.InboxPrefix() + ".>"
	switch id.Role {
	case RoleNode:
		n := id.Name
		return &Permissions{
			Publish: &SubjectPermission{
				Allow: append([]string{
					subjectPrefix + ".evt.>",               // session events (signed)
					subjectPrefix + ".pevt.>",              // the same, on a partitioned deployment
					subjectPrefix + ".nodeevt." + n + ".>", // its own node events
					subjectPrefix + ".nodehb." + n,         // its heartbeat
					"$O." + workspacesObj + ".>",           // snapshot chunks and metadata
				}, nodeJetStream()...),
			},
			Subscribe: &SubjectPermission{Allow: []string{
				subjectPrefix + ".cmd.*.*.>", // the session subjects of sessions it serves
				subjectPrefix + ".node." + n + ".>",
				subjectPrefix + ".node.announce",
				inbox,
			}},
			AllowResponses: true,
		}
	case RoleClient:
		return &Permissions{
			Publish:   &SubjectPermission{Allow: []string{subjectPrefix + ".cmd." + id.Tenant + ".>"}},
			Subscribe: &SubjectPermission{Allow: []string{inbox}},
		}
	case RoleAuditor:
		// No consumer create: its body could name a deliver subject. The
		// engine makes the auditor's pull consumer (package auditfeed) on
		// request on the auditor's own subject, and the auditor may use
		// only what a pull consumer needs.
		c := id.Consumer()
		api := "$JS.API.CONSUMER."
		allow := []string{
			commands.Subjects{Prefix: subjectPrefix}.AuditConsumer(id.Name, id.Tenant),
			"$JS.API.INFO",
		}
		for _, st := range eventStreams() {
			allow = append(allow,
				"$JS.API.STREAM.INFO."+st,
				api+"INFO."+st+"."+c,
				api+"MSG.NEXT."+st+"."+c,
				api+"DELETE."+st+"."+c,
				api+"RESET."+st+"."+c,
				"$JS.ACK."+st+"."+c+".>",
			)
		}
		return &Permissions{
			Publish:   &SubjectPermission{Allow: allow},
			Subscribe: &SubjectPermission{Allow: []string{inbox}},
		}
	}
	return nil // engine, admin
}

// nodeJetStream is the JetStream API a node uses, and no more: reading
// and appending a session's history on the events stream (stream info,
// last message per subject, an ordered consumer), and the snapshots'
// object store (its info, object info, reads through an ordered consumer,
// deletes as a purge of one object's subjects). Nothing on the
// projections' buckets, no stream or account management, no legacy
// durable create. A consumer create's body can still name a deliver
// subject (or ask for a durable), which no permission sees: receivers
// refuse what JetStream delivers (auth.Delivered).
func nodeJetStream() []string {
	api := "$JS.API."
	var out []string
	out = append(out, api+"INFO")
	for _, st := range append(eventStreams(), "OBJ_"+workspacesObj) {
		out = append(out,
			api+"STREAM.INFO."+st,
			api+"STREAM.MSG.GET."+st,
			api+"DIRECT.GET."+st, api+"DIRECT.GET."+st+".>",
			api+"CONSUMER.CREATE."+st, api+"CONSUMER.CREATE."+st+".>",
			api+"CONSUMER.INFO."+st+".*",
			api+"CONSUMER.MSG.NEXT."+st+".*",
			api+"CONSUMER.DELETE."+st+".*",
		)
	}
	// A node may delete messages where it may purge: in the workspace
	// bucket (a put takes back chunks the stream stored out of order after
	// a refusal, objectstore/put.go).
	return append(out, api+"STREAM.PURGE.OBJ_"+workspacesObj, api+"STREAM.MSG.DELETE.OBJ_"+workspacesObj,
		"$JS.FC.OBJ_"+workspacesObj+".>")
}
