// Package cluster is a NATS cluster for Paddock, as a library: its Spec
// (how many servers, where, on which ports, with TLS or not) and its
// validation; each server's nats-server configuration (ServerConf, also
// what a single server of Paddock needs) with Paddock's accounts; the
// material its edges need (a route secret, the cluster's own CA and each
// server's certificate, docs/security.md "Cluster edges"); and a Waiter
// that waits until the servers answer, Paddock's streams have their
// replicas and enough nodes are up.
//
// `engine cluster config` and `engine cluster wait` parse flags into these
// and print what they return.
package cluster
