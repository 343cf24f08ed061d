package snapshot

import (
	"slices"
)

// The values of Change.Change.
const (
	Created  = "created"
	Modified = "modified"
	Removed  = "removed"
)

// Change is one path that differs between two manifests.
type Change struct {
	Path string `json:"path"`
	// Kind is the path's kind in the later manifest (in the earlier one
	// for a removed path).
	Kind Kind `json:"kind"`
	// Change is Created, Modified or Removed.
	Change string `json:"change"`
}

// Diff returns the paths that differ from one manifest to the other,
// sorted by Path: created (only in to), removed (only in from) and
// modified (in both, with a different kind, mode, size, target or
// chunks). A nil manifest is an empty workspace.
func Diff(from, to *Manifest) []Change {
	a, b := sortedEntries(from), sortedEntries(to)
	var out []Change
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || (len(a) > 0 && a[0].Path < b[0].Path):
			out = append(out, Change{Path: a[0].Path, Kind: a[0].Kind, Change: Removed})
			a = a[1:]
		case len(a) == 0 || b[0].Path < a[0].Path:
			out = append(out, Change{Path: b[0].Path, Kind: b[0].Kind, Change: Created})
			b = b[1:]
		default:
			if !sameEntry(&a[0], &b[0]) {
				out = append(out, Change{Path: b[0].Path, Kind: b[0].Kind, Change: Modified})
			}
			a, b = a[1:], b[1:]
		}
	}
	return out
}

func sortedEntries(m *Manifest) []Entry {
	if m == nil {
		return nil
	}
	if slices.IsSortedFunc(m.Entries, cmpEntry) {
		return m.Entries
	}
	e := slices.Clone(m.Entries)
	slices.SortStableFunc(e, cmpEntry)
	return e
}

func sameEntry(a, b *Entry) bool {
	return a.Kind == b.Kind && a.Mode == b.Mode && a.Size == b.Size && a.Target == b.Target &&
		slices.Equal(a.Chunks, b.Chunks)
}
