// Package mcpserver serves a Paddock deployment's sandboxes as tools of
// the Model Context Protocol (MCP), on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), so that an MCP client (Claude
// Desktop, an agent framework, the Python mcp package) creates sessions,
// runs commands and reads and writes their files.
//
// A Server is one Paddock identity: a client.Client on a NATS connection
// made with that identity's credentials, so every command it sends
// carries that identity (the engine records the identity's NATS user as
// each event's actor) and NATS's own permissions confine it to its
// tenant. The stdio transport (engine mcp) serves one identity, the
// credentials it was started with. The streamable HTTP transport (engine
// mcp --http) serves several: a tokens file maps the SHA-256 of each
// bearer token to a credentials file (Tokens), each caller's requests
// run as the identity its token names, and a request without a known
// token is refused with 401 (HTTPHandler).
//
// Tools map Paddock's typed errors (package errcode) to tool errors: a
// result with isError set, the code first in its text and in its
// structured content ({"error": {"code", "message", "retryable"}}), never
// a failure of the server.
package mcpserver
