// Package objectstore holds workspace archives in a JetStream object store
// bucket (sbx_workspaces). Snapshots are immutable objects named
// <tenant>/<session>/<snapshot-id>.tar; a name is never overwritten,
// because the object store keeps only the latest metadata per name.
//
// This package provisions the bucket and owns the naming scheme; the
// streaming persist and hydrate paths build on it.
package objectstore
