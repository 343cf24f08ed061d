// Package console is the engine's read-only web console (`engine serve
// --console-addr`): the sessions of the tenants a viewer may see, with
// filters; one session's timeline rendered from its events; the result of
// the audit check of that session; a live tail of its events (server-sent
// events); and, for admins, the nodes, their warm pools and the storage.
//
// It reads through the code the CLI reads through: the sessions projection
// (projector.OpenSessions), the events stream (events.Log.Read), the audit
// checker (audit.Checker, as `engine audit verify --session`) and the
// operator's status (operator.Status, as `engine status`). It writes
// nothing to NATS.
//
// Who may see what: a tokens file (the format of `engine mcp --tokens`,
// mcpserver.LoadTokens) maps the SHA-256 of each console token to a
// Paddock credentials file; the identity in it is the viewer. An admin (or
// the engine, or an auditor of every tenant) sees every tenant; a client,
// or an auditor of one tenant, sees only that tenant. A browser logs in
// once with its token (POST /login) and then holds an opaque session
// cookie (HttpOnly, SameSite=Strict); scripts may send the token as
// "Authorization: Bearer". Pages are rendered server-side by html/template
// (contextual escaping), the assets are embedded (embed.FS), and every
// response carries a strict Content-Security-Policy with no inline script
// and no source but the console's own.
package console
