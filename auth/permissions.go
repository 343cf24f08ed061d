package auth

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
)

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
				Allow: []string{
					subjectPrefix + ".evt.>",               // session events (signed)
					subjectPrefix + ".nodeevt." + n + ".>", // its own node events
					subjectPrefix + ".nodehb." + n,         // its heartbeat
					"$JS.API.>",                            // JetStream requests, less the deny list
					"$O." + workspacesObj + ".>",           // snapshot chunks and metadata
				},
				// A node may delete messages where it may purge: in the
				// workspace bucket (a put takes back chunks the stream
				// stored out of order after a refusal, objectstore/put.go).
				Deny: []string{
					"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
					"$JS.API.ACCOUNT.>", "$JS.API.SERVER.>",
					"$JS.API.STREAM.PURGE." + eventsStream,
					"$JS.API.STREAM.PURGE.KV_" + sessionsBucket,
					"$JS.API.STREAM.PURGE.KV_" + nodesBucket,
					"$JS.API.STREAM.PURGE.KV_" + stateBucket,
					"$JS.API.STREAM.MSG.DELETE." + eventsStream,
					"$JS.API.STREAM.MSG.DELETE.KV_" + sessionsBucket,
					"$JS.API.STREAM.MSG.DELETE.KV_" + nodesBucket,
					"$JS.API.STREAM.MSG.DELETE.KV_" + stateBucket,
				},
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
		c := id.Consumer()
		events := subjectPrefix + ".evt.>"
		if id.Tenant != "" {
			events = subjectPrefix + ".evt." + id.Tenant + ".>"
		}
		api := "$JS.API.CONSUMER."
		return &Permissions{
			Publish: &SubjectPermission{Allow: []string{
				"$JS.API.INFO",
				"$JS.API.STREAM.INFO." + eventsStream,
				api + "CREATE." + eventsStream + "." + c + "." + events,
				api + "CREATE." + eventsStream + "." + c + "." + subjectPrefix + ".nodeevt.>",
				api + "INFO." + eventsStream + "." + c,
				api + "MSG.NEXT." + eventsStream + "." + c,
				api + "DELETE." + eventsStream + "." + c,
				api + "RESET." + eventsStream + "." + c,
				"$JS.ACK." + eventsStream + "." + c + ".>",
			}},
			Subscribe: &SubjectPermission{Allow: []string{inbox}},
		}
	}
	return nil // engine, admin
}
