package images

// WithImageFiles is withImageFiles, for the tests.
var WithImageFiles = withImageFiles
