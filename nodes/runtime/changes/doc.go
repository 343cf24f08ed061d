// Package changes watches a workspace tree and says what changed in it
// between two points: the change attribution of exec and processes
// (commands.Changes with Observed "watch").
//
// A Watcher is one inotify instance over every directory of the tree,
// started with a sandbox (lazily, at its first watched command) and
// closed with it; its one goroutine reads the events and is stopped and
// waited for by Close. Directories get watches as they appear, and what
// a new directory holds when its watch is added is scanned and counted
// as created (a command that makes a directory and files in it at once
// races the watch: the scan closes that race; a path both scanned and
// reported is counted once).
//
// # Why inotify through golang.org/x/sys/unix
//
// fsnotify is not recursive, and it hides IN_CLOSE_WRITE (bytes written
// are counted when a file written is closed) and the event cookies that
// pair the two halves of a rename; fanotify needs CAP_SYS_ADMIN, which
// the supervisor (the sandbox's user, no privileges) does not have. Raw
// inotify on one descriptor gives all of that, and one more property the
// completeness of a window rests on: the kernel queues one descriptor's
// events in the order they happened.
//
// # Windows and fences
//
// Begin opens an attribution window and End closes it. Both are fenced:
// the watcher makes and removes a directory in a private directory of
// its own (outside the workspace, watched by the same descriptor), and a
// window counts exactly the events read after its opening fence and
// before its closing one. End waits (within Config.FenceWait and its
// ctx) until the closing fence has been read, so every event of a
// command that has exited is in its window; a fence that does not come
// marks the window Truncated.
//
// Within a window a path's changes fold: created then modified is
// created, created then removed is nothing, modified then removed is
// removed, removed then created is modified. A rename counts as the old
// path removed and the new one created (a renamed directory's contents
// are not listed again). Overlapped is set on every window that was open
// while another one was.
//
// # Bounds
//
// Memory is bounded whatever the sandbox does: at most Config.MaxTracked
// distinct paths (and Config.MaxTrackedBytes of their names) are held to
// classify, over all open windows; beyond it the events are only counted
// and the window is Truncated. At most Config.MaxWatches directories are
// watched, none deeper than Config.MaxDepth; a directory that cannot be
// watched (those bounds, or the kernel's max_user_watches) and a queue
// overflow (IN_Q_OVERFLOW) mark the open windows Truncated, and so do
// later ones while a directory stays unwatched (after an overflow the
// tree is scanned again for directories that lack a watch).
//
// # Trust
//
// Inside a Docker sandbox the watcher runs in the supervisor, as the
// sandbox's user: the sandbox's code can disturb it (remove its fence
// directory, kill it). What it reports is the sandbox's account of
// itself, as exit codes are.
package changes
