package nodes

// LostProcesses exposes lostProcesses to the package's external tests.
var LostProcesses = lostProcesses
