// Package auth holds Paddock's identities on the bus: the roles (engine,
// admin, node, client, auditor), their nkeys and credentials files, the
// NATS server authorization that gives each role exactly the subjects it
// needs, and the check that a command's tenant is its sender's.
//
// The model is one NATS account per tenant plus one account, PADDOCK, for
// the engine, the nodes and the auditors (docs/security.md says why).
// A tenant's account imports the service sbx.cmd.<tenant>.> from PADDOCK
// with share on, so the server stamps every command it carries into
// PADDOCK with the sender's account and user (the Nats-Request-Info
// header); Caller reads that stamp. Nothing a client writes in a request
// can name another tenant: its account can only reach its own subjects.
// Inside PADDOCK, where nothing is stamped, the permissions decide who may
// publish on each subject, and JetStream, which publishes as the account
// wherever a consumer or a reply subject points it, is never taken for a
// sender: Delivered refuses what it sends, and CallerOf with it.
//
// A Store is a directory (0700) with the identities, one credentials
// file per identity (0600, holding its nkey seed) and the generated
// server config (accounts.conf), which an embedded server loads and an
// external nats-server includes.
package auth
