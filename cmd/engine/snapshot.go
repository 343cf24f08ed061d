package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/objectstore"
	"github.com/paddock-dev/paddock/projection"
	"github.com/paddock-dev/paddock/projector"
)

const snapshotUsage = `usage: engine snapshot ls [SESSION] [--all-tenants] [--totals] [--json]
       engine snapshot rm SESSION SNAPSHOT...   delete these snapshots of a session
       engine snapshot rm SESSION --all         delete every snapshot of a session
       engine snapshot rm --deleted [--all-tenants]
                                                delete the snapshots of deleted sessions`

// snapshotCmd is `engine snapshot`: list the workspace snapshots and
// delete them, which frees the workspace bucket's quota at once. A
// session restored later from a deleted snapshot fails with
// snapshot_not_found. Deleting a session keeps its snapshots (nothing can
// restore them again); --deleted removes those.
func snapshotCmd(ctx context.Context, base globals, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "ls" && args[0] != "rm") {
		return usageErr("%s", snapshotUsage)
	}
	sub := args[0]
	var g globals
	fs := newFlagSet("snapshot "+sub, stderr)
	g.register(fs, base)
	allTenants := fs.Bool("all-tenants", false, "every tenant's snapshots; --tenant is ignored")
	jsonOut, all, deleted, totals := fs.Bool("json", false, "print JSON"), new(bool), new(bool), new(bool)
	if sub == "ls" {
		totals = fs.Bool("totals", false, "print only each tenant's totals: logical bytes of its snapshots, bytes of its distinct chunks")
	} else {
		all = fs.Bool("all", false, "every snapshot of the session")
		deleted = fs.Bool("deleted", false, "the snapshots of every session the projection lists as deleted")
	}
	pos, rest, err := parseInterleaved(fs, args[1:])
	if err != nil {
		return err
	}
	switch {
	case rest != nil:
		return usageErr("snapshot %s takes no command after --", sub)
	case sub == "ls" && len(pos) > 1:
		return usageErr("snapshot ls takes at most one session id")
	case sub == "rm" && *deleted && (len(pos) > 0 || *all):
		return usageErr("snapshot rm --deleted takes no session, snapshot or --all")
	case sub == "rm" && !*deleted && (len(pos) == 0 || (len(pos) == 1) != *all):
		return usageErr("%s", snapshotUsage)
	case *allTenants && len(pos) > 0:
		return usageErr("--all-tenants lists every session's snapshots: name no session")
	}
	for i, p := range pos {
		what := "snapshot"
		if i == 0 {
			what = "session"
		}
		if err := commands.CheckToken(what, p); err != nil {
			return err
		}
	}
	if err := commands.CheckToken("tenant", g.tenant); err != nil {
		return err
	}
	js, store, closeConn, err := openWorkspaces(ctx, &g, "snapshots")
	if err != nil {
		return err
	}
	defer closeConn()
	prefix := ""
	if !*allTenants {
		session := ""
		if len(pos) > 0 {
			session = pos[0]
		}
		prefix = objectstore.SnapshotPrefix(g.tenant, session)
	}
	switch {
	case sub == "ls":
		return listSnapshots(ctx, store, prefix, g.tenant, *allTenants, *totals, *jsonOut, stdout)
	case *deleted:
		return removeDeleted(ctx, js, store, g.tenant, *allTenants, stdout, *jsonOut)
	case *all:
		snaps, err := store.Snapshots(ctx, prefix)
		if err != nil {
			return err
		}
		return removeSnapshots(ctx, store, snaps, stdout, *jsonOut)
	}
	var n int
	for _, id := range pos[1:] {
		if err := store.DeleteSnapshot(ctx, g.tenant, pos[0], id); err != nil {
			return fmt.Errorf("after %d deleted: %w", n, err)
		}
		n++
	}
	if *jsonOut {
		return printJSON(stdout, deletedSnapshots{Deleted: n})
	}
	fmt.Fprintf(stdout, "deleted %d snapshots\n", n)
	return nil
}

// removeSnapshots deletes snaps and says how much it freed.
func removeSnapshots(ctx context.Context, store *objectstore.Store, snaps []objectstore.Snapshot, stdout io.Writer, jsonOut bool) error {
	var freed int64
	for i, s := range snaps {
		tenant, session, id, _ := objectstore.ParseSnapshotName(s.Name)
		if err := store.DeleteSnapshot(ctx, tenant, session, id); err != nil && !errors.Is(err, errcode.ErrSnapshotNotFound) {
			return fmt.Errorf("after %d deleted: %w", i, err)
		}
		freed += s.Size
	}
	if jsonOut {
		return printJSON(stdout, deletedSnapshots{Deleted: len(snaps), Bytes: &freed})
	}
	fmt.Fprintf(stdout, "deleted %d snapshots, %d bytes\n", len(snaps), freed)
	return nil
}

// removeDeleted deletes the snapshots of the sessions the projection
// lists as deleted: of tenant, or of every tenant.
func removeDeleted(ctx context.Context, js jetstream.JetStream, store *objectstore.Store, tenant string, allTenants bool, stdout io.Writer, jsonOut bool) error {
	ss, err := projector.OpenSessions(ctx, js)
	if err != nil {
		return err
	}
	filter := projection.TenantKeys(tenant)
	if allTenants {
		filter = ">"
	}
	recs, err := ss.List(ctx, filter)
	if err != nil {
		return err
	}
	var snaps []objectstore.Snapshot
	for _, r := range recs {
		if r.Status != projection.StatusDeleted {
			continue
		}
		s, err := store.Snapshots(ctx, objectstore.SnapshotPrefix(r.Tenant, r.ID))
		if err != nil {
			return err
		}
		snaps = append(snaps, s...)
	}
	return removeSnapshots(ctx, store, snaps, stdout, jsonOut)
}

// openWorkspaces dials JetStream with g's credentials, which must be the
// engine's or an admin's (an auditor is refused: what, e.g. "gc", is for
// them), and opens the workspace bucket. closeConn closes the connection.
func openWorkspaces(ctx context.Context, g *globals, what string) (jetstream.JetStream, *objectstore.Store, func(), error) {
	js, closeConn, err := dialJS(g)
	if err != nil {
		return nil, nil, nil, err
	}
	if g.consumer() != "" {
		closeConn()
		return nil, nil, nil, errcode.New(errcode.PermissionDenied, "%s is an auditor: %s is for the engine's and admins' credentials", g.who.Name, what)
	}
	store, err := objectstore.Open(ctx, js, "")
	if err != nil {
		closeConn()
		return nil, nil, nil, err
	}
	return js, store, closeConn, nil
}
