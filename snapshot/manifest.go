package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/paddock-dev/paddock/errcode"
)

// Format is the commands.Snapshot format of a manifest snapshot.
const Format = "manifest"

// Version is the manifest encoding's version.
const Version = 1

// ChunkSize is the size of every chunk of a file but its last.
const ChunkSize = 1 << 20

// Kind is the type of a manifest entry.
type Kind string

// The kinds of entry a manifest holds. Anything else a workspace holds
// (sockets, FIFOs, devices) is left out, as the tar export leaves it out.
const (
	KindFile    Kind = "file"
	KindDir     Kind = "dir"
	KindSymlink Kind = "symlink"
)

// Entry is one path of a workspace.
type Entry struct {
	// Path is workspace-relative, slash-separated and clean ("a/b", never
	// "", ".", "/a", "a/../b").
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	// Mode is the permission bits (and setuid, setgid, sticky: 07777).
	Mode uint32 `json:"mode"`
	// Size is a file's length in bytes.
	Size int64 `json:"size,omitempty"`
	// Target is a symlink's target, as read (never followed).
	Target string `json:"target,omitempty"`
	// Chunks are the hex sha256 digests of a file's content in ChunkSize
	// pieces: ceil(Size/ChunkSize) of them (none for an empty file).
	Chunks []string `json:"chunks,omitempty"`
}

// Manifest is a workspace's state: its entries sorted by Path, each path
// once, every parent directory of an entry listed before it.
type Manifest struct {
	Version int     `json:"version"`
	Entries []Entry `json:"entries"`
}

// Limits bound a manifest a node decodes.
type Limits struct {
	// MaxEntries bounds the entries (0: 1,000,000).
	MaxEntries int
	// MaxBytes bounds the logical bytes, the sum of file sizes (0: 1 TiB).
	MaxBytes int64
}

// errInvalid is the error of a manifest that does not hold.
func errInvalid(format string, args ...any) error {
	return errcode.New(errcode.InvalidRequest, "manifest: "+format, args...)
}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = 1_000_000
	}
	if l.MaxBytes <= 0 {
		l.MaxBytes = 1 << 40
	}
	return l
}

// maxEntryBytes bounds the encoded size of one entry on average: Decode
// refuses input longer than MaxEntries of them before parsing it.
const maxEntryBytes = 1 << 10

// Encode returns the manifest's canonical encoding: encoding/json of the
// struct with Version set to Version, the entries sorted by Path and an
// empty manifest's entries as []. It does not change m.
func (m *Manifest) Encode() []byte {
	c := Manifest{Version: Version, Entries: m.Entries}
	if !slices.IsSortedFunc(c.Entries, cmpEntry) {
		c.Entries = slices.Clone(c.Entries)
		slices.SortStableFunc(c.Entries, cmpEntry)
	}
	return appendManifest(make([]byte, 0, 160*len(c.Entries)+32), c.Entries)
}

// appendManifest appends the encoding/json encoding of a Manifest of
// version Version with entries (nil as []) to b, byte for byte what
// json.Marshal writes (TestEncodeIsEncodingJSON and FuzzEncode check it
// against json.Marshal), two to three times faster: a persist encodes a
// manifest of every workspace entry for its root and to store it.
func appendManifest(b []byte, entries []Entry) []byte {
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, Version, 10)
	b = append(b, `,"entries":[`...)
	for i := range entries {
		e := &entries[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"path":`...)
		b = appendJSONString(b, e.Path)
		b = append(b, `,"kind":`...)
		b = appendJSONString(b, string(e.Kind))
		b = append(b, `,"mode":`...)
		b = strconv.AppendUint(b, uint64(e.Mode), 10)
		if e.Size != 0 {
			b = append(b, `,"size":`...)
			b = strconv.AppendInt(b, e.Size, 10)
		}
		if e.Target != "" {
			b = append(b, `,"target":`...)
			b = appendJSONString(b, e.Target)
		}
		if len(e.Chunks) > 0 {
			b = append(b, `,"chunks":[`...)
			for j, d := range e.Chunks {
				if j > 0 {
					b = append(b, ',')
				}
				b = appendJSONString(b, d)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendJSONString appends s as encoding/json quotes a string (HTML
// escaping on, as json.Marshal has it): ", \, \b, \f, \n, \r and \t
// by their short escapes, other control bytes and <, > and & as \u00XX,
// U+2028 and U+2029 as \u2028 and \u2029, invalid UTF-8 as \ufffd.
func appendJSONString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Root returns the manifest's root digest: the hex sha256 of Encode().
func (m *Manifest) Root() string {
	sum := sha256.Sum256(m.Encode())
	return hex.EncodeToString(sum[:])
}

// Decode parses and validates an encoded manifest, which may come from
// anyone: unknown fields, a version other than Version, entries out of
// order or repeated, paths that are not clean and relative, entries whose
// parent directory is not listed before them, unknown kinds, modes above
// 07777, negative sizes, a file whose chunk count is not
// ceil(Size/ChunkSize), digests that are not 64 lowercase hex digits,
// symlinks without a target or with a size or chunks, and directories
// with a size or chunks are invalid_request. More entries or logical bytes
// than lim allows, or input longer than lim.MaxEntries KiB, are
// payload_too_large.
func Decode(b []byte, lim Limits) (*Manifest, error) {
	lim = lim.withDefaults()
	if int64(len(b)) > int64(lim.MaxEntries)*maxEntryBytes {
		return nil, errcode.New(errcode.PayloadTooLarge, "manifest: %d bytes is more than %d entries may take", len(b), lim.MaxEntries)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, errcode.Wrap(errcode.InvalidRequest, err, "manifest: not a manifest's JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errInvalid("data after the manifest")
	}
	if m.Entries == nil {
		m.Entries = []Entry{}
	}
	for i := range m.Entries {
		if len(m.Entries[i].Chunks) == 0 {
			m.Entries[i].Chunks = nil // as the canonical encoding leaves it
		}
	}
	if err := m.validate(lim); err != nil {
		return nil, err
	}
	return &m, nil
}

// validate checks everything Decode promises about m.
func (m *Manifest) validate(lim Limits) error {
	if m.Version != Version {
		return errInvalid("version %d, want %d", m.Version, Version)
	}
	if len(m.Entries) > lim.MaxEntries {
		return errcode.New(errcode.PayloadTooLarge, "manifest: %d entries, more than %d", len(m.Entries), lim.MaxEntries)
	}
	dirs := make(map[string]bool)
	var total int64
	for i := range m.Entries {
		e := &m.Entries[i]
		if err := checkPath(e.Path); err != nil {
			return err
		}
		if i > 0 && m.Entries[i-1].Path >= e.Path {
			return errInvalid("entry %q is out of order or repeated (after %q)", e.Path, m.Entries[i-1].Path)
		}
		if p := path.Dir(e.Path); p != "." && !dirs[p] {
			return errInvalid("entry %q: its parent %q is not a directory listed before it", e.Path, p)
		}
		if e.Mode > 0o7777 {
			return errInvalid("entry %q: mode %o is more than 07777", e.Path, e.Mode)
		}
		switch e.Kind {
		case KindDir:
			if e.Size != 0 || len(e.Chunks) != 0 || e.Target != "" {
				return errInvalid("directory %q has a size, chunks or a target", e.Path)
			}
			dirs[e.Path] = true
		case KindSymlink:
			if e.Target == "" || strings.ContainsRune(e.Target, 0) || !utf8.ValidString(e.Target) {
				return errInvalid("symlink %q has an empty target, or one with a NUL byte or not UTF-8", e.Path)
			}
			if e.Size != 0 || len(e.Chunks) != 0 {
				return errInvalid("symlink %q has a size or chunks", e.Path)
			}
		case KindFile:
			if e.Target != "" {
				return errInvalid("file %q has a target", e.Path)
			}
			if e.Size < 0 {
				return errInvalid("file %q has a negative size", e.Path)
			}
			if e.Size > lim.MaxBytes-total {
				return errcode.New(errcode.PayloadTooLarge, "manifest: files hold more than %d bytes", lim.MaxBytes)
			}
			total += e.Size
			if want := chunkCount(e.Size); int64(len(e.Chunks)) != want {
				return errInvalid("file %q of %d bytes has %d chunks, want %d", e.Path, e.Size, len(e.Chunks), want)
			}
			for _, d := range e.Chunks {
				if !validDigest(d) {
					return errInvalid("file %q: chunk digest %q is not 64 lowercase hex digits", e.Path, d)
				}
			}
		default:
			return errInvalid("entry %q has the unknown kind %q", e.Path, e.Kind)
		}
	}
	return nil
}

// checkPath checks that p is a clean, relative, slash-separated path
// that stays in the workspace and names something below its root.
func checkPath(p string) error {
	if p == "" || p == "." || strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) ||
		path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || !utf8.ValidString(p) {
		return errInvalid("path %q is not clean, relative, UTF-8 and below the root", p)
	}
	return nil
}

// validDigest reports whether d is a hex sha256: 64 lowercase hex digits.
func validDigest(d string) bool {
	if len(d) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(d); i++ {
		if c := d[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// chunkCount is ceil(size/ChunkSize).
func chunkCount(size int64) int64 { return (size + ChunkSize - 1) / ChunkSize }

// chunkLen is the length of chunk i of a file of size bytes.
func chunkLen(size int64, i int) int64 { return min(ChunkSize, size-int64(i)*ChunkSize) }

func cmpEntry(a, b Entry) int { return strings.Compare(a.Path, b.Path) }

// Stats returns the manifest's regular files, its entries and its logical
// bytes (the sum of file sizes).
func (m *Manifest) Stats() (files, entries int, bytes int64) {
	for _, e := range m.Entries {
		if e.Kind == KindFile {
			files++
			bytes += e.Size
		}
	}
	return files, len(m.Entries), bytes
}

// ChunkSet returns the manifest's distinct chunk digests, each with its
// length in bytes.
func (m *Manifest) ChunkSet() map[string]int64 {
	set := make(map[string]int64)
	for _, e := range m.Entries {
		for i, d := range e.Chunks {
			set[d] = chunkLen(e.Size, i)
		}
	}
	return set
}

// Lookup returns the entry of path (a clean workspace-relative path) and
// whether there is one. The entries must be sorted, as Decode, Scan and
// FromTar leave them.
func (m *Manifest) Lookup(p string) (Entry, bool) {
	i, ok := slices.BinarySearchFunc(m.Entries, p, func(e Entry, p string) int { return strings.Compare(e.Path, p) })
	if !ok {
		return Entry{}, false
	}
	return m.Entries[i], true
}
