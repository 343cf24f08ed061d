package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"

	"github.com/paddock-dev/paddock/objectstore"
)

// tenantTotals is one tenant's line of `snapshot ls`: what its snapshots
// hold (logical) against what its content chunks take (stored once per
// tenant, shared by its manifest snapshots).
type tenantTotals struct {
	Tenant    string `json:"tenant"`
	Snapshots int    `json:"snapshots"`
	// LogicalBytes sums the snapshots' Bytes (file bytes of each
	// workspace, as if each were stored whole).
	LogicalBytes int64 `json:"logical_bytes"`
	// SnapshotBytes sums the snapshots' Size: the tar objects, and for a
	// manifest its object and the chunks its persist stored.
	SnapshotBytes int64 `json:"snapshot_bytes"`
	// Chunks and ChunkBytes are the tenant's distinct chunks and their
	// stored bytes now.
	Chunks     int   `json:"chunks"`
	ChunkBytes int64 `json:"chunk_bytes"`
}

// listSnapshots is `snapshot ls`: the snapshots under prefix (both
// formats), then the totals of tenant (of every tenant with allTenants);
// with totals only those.
func listSnapshots(ctx context.Context, store *objectstore.Store, prefix, tenant string, allTenants, totals, jsonOut bool, stdout io.Writer) error {
	snaps, err := store.Snapshots(ctx, prefix)
	if err != nil {
		return err
	}
	// The totals are the tenant's (every tenant's), whatever session is
	// listed.
	chunkTenant, all := tenant, snaps
	if allTenants {
		chunkTenant = ""
	} else if prefix != objectstore.SnapshotPrefix(tenant, "") {
		if all, err = store.Snapshots(ctx, objectstore.SnapshotPrefix(tenant, "")); err != nil {
			return err
		}
	}
	chunks, err := store.Chunks(ctx, chunkTenant)
	if err != nil {
		return err
	}
	byTenant := map[string]*tenantTotals{}
	get := func(t string) *tenantTotals {
		if byTenant[t] == nil {
			byTenant[t] = &tenantTotals{Tenant: t}
		}
		return byTenant[t]
	}
	for _, s := range all {
		t, _, _, _ := objectstore.ParseSnapshotName(s.Name)
		tt := get(t)
		tt.Snapshots++
		tt.LogicalBytes += s.Bytes
		tt.SnapshotBytes += s.Size
	}
	for _, c := range chunks {
		tt := get(c.Tenant)
		tt.Chunks++
		tt.ChunkBytes += c.Size
	}
	tots := make([]tenantTotals, 0, len(byTenant))
	for _, tt := range byTenant {
		tots = append(tots, *tt)
	}
	sort.Slice(tots, func(i, j int) bool { return tots[i].Tenant < tots[j].Tenant })
	if jsonOut {
		if totals {
			return printJSON(stdout, tots)
		}
		if snaps == nil {
			snaps = []objectstore.Snapshot{}
		}
		return printJSON(stdout, snaps)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if !totals {
		fmt.Fprintln(tw, "TENANT\tSESSION\tSNAPSHOT\tSIZE\tCREATED\tFORMAT\tBYTES\tMEMBERS\tROOT")
		var total int64
		for _, s := range snaps {
			t, session, _, _ := objectstore.ParseSnapshotName(s.Name)
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", t, session, s.ID, s.Size, timeOrDash(s.Created), s.Format, s.Bytes, s.Members, shortRoot(s.RootSHA256))
			total += s.Size
		}
		fmt.Fprintf(tw, "(%d snapshots, %d bytes)\n", len(snaps), total)
	}
	for _, tt := range tots {
		fmt.Fprintf(tw, "tenant %s: %d logical bytes in %d snapshots; %d distinct chunks store %d bytes\n", tt.Tenant, tt.LogicalBytes, tt.Snapshots, tt.Chunks, tt.ChunkBytes)
	}
	return tw.Flush()
}

// shortRoot is the first 12 hex digits of a root digest, "-" for none.
func shortRoot(root string) string {
	if root == "" {
		return "-"
	}
	return root[:min(12, len(root))]
}
