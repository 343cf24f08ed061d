// Package errcode is Paddock's one registry of wire error codes.
//
// Every error that crosses a NATS subject carries a stable Code, a human
// message and a retryable flag. Code values never change meaning once
// published: clients match on them (errors.Is with a *Error of the same code,
// or the sentinel values below), never on message text.
//
// Inside a process, layers wrap these errors with %w; at the wire they become
// {code, message, retryable} (see commands.Reply) and the client turns them
// back into *Error values so errors.Is keeps working across the network.
package errcode
