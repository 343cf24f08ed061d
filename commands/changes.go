package commands

// MaxChangedPaths bounds the paths a Changes lists.
const MaxChangedPaths = 32

// How a Changes was observed.
const (
	// ObservedExact: the node made the change itself (write, rm, mkdir,
	// hydrate) and knows every path.
	ObservedExact = "exact"
	// ObservedWatch: a watch on the workspace (inotify, in the sandbox's
	// supervisor or the local runtime) saw the op's changes.
	ObservedWatch = "watch"
)

// Changes is what an op changed in the workspace: events record it in the finish data of
// every op that can change it (exec, proc exit, write, rm, mkdir,
// hydrate).
type Changes struct {
	Created  int `json:"created"`
	Modified int `json:"modified"`
	Removed  int `json:"removed"`
	// BytesWritten is what the op wrote to files (as observed: a watch
	// counts the sizes of files it saw written when they were closed).
	BytesWritten int64 `json:"bytes_written"`
	// Paths are the first changed paths, at most MaxChangedPaths.
	Paths []ChangedPath `json:"paths,omitempty"`
	// Truncated says there were more paths than Paths lists, or that the
	// watch lost events (its queue overflowed) and the counts are a floor.
	Truncated bool `json:"truncated,omitempty"`
	// Overlapped says other processes of the sandbox ran meanwhile, so
	// some changes may be theirs: attribution is approximate.
	Overlapped bool `json:"overlapped,omitempty"`
	// Observed is how the changes were seen (ObservedExact, ObservedWatch).
	Observed string `json:"observed"`
}

// ChangedPath is one path an op changed: Change is "created",
// "modified" or "removed".
type ChangedPath struct {
	Path   string `json:"path"`
	Change string `json:"change"`
}
