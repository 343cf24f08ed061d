package commands

import (
	"strconv"
	"strings"

	"github.com/paddock-dev/paddock/errcode"
)

// The contract version this code speaks. Every request and reply carries
// it as "MAJOR.MINOR" (Request.Version, Reply.Version).
//
// The compatibility rule:
//
//   - A minor version may only add: new optional fields (whose absence
//     means what the previous minor did), new ops, new error codes, new
//     event data fields. A server of an older minor ignores the unknown
//     fields of a request that says it is newer, so a field a minor adds
//     must be safe to ignore; a client that needs it honoured reads
//     Reply.Version to learn what the server spoke.
//   - Anything else (removing or renaming a field, changing a field's
//     type, meaning or default, making an optional field required) needs
//     a new major version. A server answers a major version it does not
//     speak with unsupported_version.
//   - A request of the server's own minor or an older one is decoded
//     strictly: an unknown field there is a client bug (a misspelt
//     "timout_ms") and is invalid_request.
//
// A request without a version is taken as 1.0.
const (
	ContractMajor = 1
	ContractMinor = 6
)

// Version is the contract version as it travels: "1.0".
var Version = strconv.Itoa(ContractMajor) + "." + strconv.Itoa(ContractMinor)

// ContractVersion is a parsed "MAJOR.MINOR".
type ContractVersion struct {
	Major, Minor int
}

// String returns "MAJOR.MINOR".
func (v ContractVersion) String() string {
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor)
}

// ParseVersion reads a request's version. Empty is 1.0; anything but two
// decimal numbers of at most four digits joined by a dot is
// invalid_request.
func ParseVersion(s string) (ContractVersion, error) {
	if s == "" {
		return ContractVersion{Major: 1}, nil
	}
	maj, min, ok := strings.Cut(s, ".")
	a, aok := smallUint(maj)
	b, bok := smallUint(min)
	if !ok || !aok || !bok {
		return ContractVersion{}, errcode.New(errcode.InvalidRequest, "version %q is not MAJOR.MINOR, e.g. %q", clip(s, 16), Version)
	}
	return ContractVersion{Major: a, Minor: b}, nil
}

// smallUint parses 1 to 4 decimal digits.
func smallUint(s string) (int, bool) {
	if len(s) == 0 || len(s) > 4 {
		return 0, false
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// Check returns unsupported_version unless v's major version is the one
// this code speaks.
func (v ContractVersion) Check() error {
	if v.Major != ContractMajor {
		return errcode.New(errcode.UnsupportedVersion, "contract version %s is not supported; this server speaks %s (major %d only)", v, Version, ContractMajor)
	}
	return nil
}

// Strict reports whether a request of version v is decoded strictly:
// true unless it says it is of a newer minor than this code.
func (v ContractVersion) Strict() bool { return v.Minor <= ContractMinor }

// clip shortens s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
