// Package auditfeed makes auditors' events consumers for them. An auditor
// reads the events stream through one pull consumer named for it
// (auth.Identity.Consumer), but may not create it: a consumer create's
// body can name a deliver subject, onto which JetStream would push events
// inside the PADDOCK account, and no permission sees the body. So the
// auditor asks the engine on its own subject (commands.Subjects.
// AuditConsumer, which its permissions alone allow it), the engine checks
// the filter against the auditor's tenant and makes a pull consumer, and
// the auditor reads it with the consumer calls a pull consumer needs
// (info, next, ack, reset, delete). docs/security.md has the table.
package auditfeed
