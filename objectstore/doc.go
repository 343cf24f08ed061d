// Package objectstore holds workspace snapshots in a JetStream object
// store bucket (sbx_workspaces). Snapshots are immutable objects named
// <tenant>/<session>/<snapshot-id>.tar (a workspace tar) or
// <snapshot-id>.manifest (a content-addressed manifest, package
// snapshot); a name is never overwritten, because the object store keeps
// only the latest metadata per name. The content of manifest snapshots is
// stored once per tenant as chunks named chunks/<tenant>/<sha256>
// (chunks.go, manifests.go).
//
// This package provisions the bucket and owns the naming scheme; the
// streaming persist and hydrate paths build on it.
package objectstore
