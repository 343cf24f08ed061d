// Package flagconfig gives a command's flags two more sources, read
// through koanf: a YAML configuration file and the environment. A flag
// the command line set keeps its value; else the environment's
// (PREFIX + the flag name in upper snake case: PADDOCK_STATE_DIR for
// --state-dir), else the file's (the key is the flag name: state-dir),
// else its default. Effective lists every flag with its value and where
// it came from, secrets masked, for `config print`.
package flagconfig

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/v2"
	flag "github.com/spf13/pflag"
)

// Source is where a flag's value came from.
type Source string

// The sources, strongest first.
const (
	FromFlag    Source = "flag"
	FromEnv     Source = "env"
	FromFile    Source = "file"
	FromDefault Source = "default"
)

// Config says where a command's settings may come from besides its
// command line.
type Config struct {
	// File is the YAML configuration file ("" for none).
	File string
	// Prefix is the environment variables' prefix ("PADDOCK_").
	Prefix string
	// Aliases maps more environment variables to flag names, for names
	// that predate the rule (PADDOCK_URL for --nats-url).
	Aliases map[string]string
	// Environ lists the environment as os.Environ does (nil: os.Environ).
	Environ func() []string
	// Skip names flags no other source may set (--config itself).
	Skip []string
}

// Sources records, per flag name, where its value came from.
type Sources map[string]Source

// Apply sets each flag of fs the command line left unset from the
// environment, else from the file. It returns each flag's source, or an
// error naming the file, the variable or the key that does not parse:
// an unknown key in the file is an error too (a misspelt setting must
// not pass silently).
func Apply(fs *flag.FlagSet, c Config) (Sources, error) {
	fileK, err := loadFile(c.File)
	if err != nil {
		return nil, err
	}
	for _, key := range fileK.Keys() {
		if fs.Lookup(key) == nil || skipped(c.Skip, key) {
			return nil, fmt.Errorf("config %s: %q is not a setting (the keys are the flag names)", c.File, key)
		}
	}
	envK, envNames, err := loadEnv(fs, c)
	if err != nil {
		return nil, err
	}
	src := Sources{}
	var firstErr error
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case firstErr != nil:
		case f.Changed:
			src[f.Name] = FromFlag
		case skipped(c.Skip, f.Name):
			src[f.Name] = FromDefault
		case envK.Exists(f.Name):
			if err := set(fs, f.Name, envK.Get(f.Name)); err != nil {
				firstErr = fmt.Errorf("env %s: %w", envNames[f.Name], err)
			}
			src[f.Name] = FromEnv
		case fileK.Exists(f.Name):
			if err := set(fs, f.Name, fileK.Get(f.Name)); err != nil {
				firstErr = fmt.Errorf("config %s: %s: %w", c.File, f.Name, err)
			}
			src[f.Name] = FromFile
		default:
			src[f.Name] = FromDefault
		}
	})
	// Set marks a flag changed; the sources say which were the command
	// line's.
	return src, firstErr
}

func loadFile(path string) (*koanf.Koanf, error) {
	// The delimiter is one no flag name has: every key stays flat.
	k := koanf.New("\x00")
	if path == "" {
		return k, nil
	}
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if err := k.Load(fileBytes(b), yaml.Parser()); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return k, nil
}

// MaxFileBytes bounds a configuration file: settings are a few kilobytes,
// and a path that names something endless (/dev/zero, a FIFO nobody
// writes to) must be an error, not a process that fills its memory or
// waits for ever.
const MaxFileBytes = 1 << 20

// readFile reads a regular file of at most MaxFileBytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFileBytes {
		return nil, fmt.Errorf("larger than %d bytes", MaxFileBytes)
	}
	return b, nil
}

// fileBytes is a koanf provider of a file already read.
type fileBytes []byte

// ReadBytes returns the file's bytes, for a parser.
func (b fileBytes) ReadBytes() ([]byte, error) { return b, nil }

// Read is not supported: the bytes need a parser.
func (fileBytes) Read() (map[string]any, error) {
	return nil, errors.New("flagconfig: file bytes need a parser")
}

// loadEnv reads the variables of the prefix that name a flag of fs, and
// the aliases; it returns them by flag name, and each one's variable.
func loadEnv(fs *flag.FlagSet, c Config) (*koanf.Koanf, map[string]string, error) {
	names := map[string]string{}
	k := koanf.New("\x00")
	opt := env.Opt{
		EnvironFunc: c.Environ,
		TransformFunc: func(key, value string) (string, any) {
			name, ok := c.Aliases[key]
			if !ok {
				if c.Prefix == "" || !strings.HasPrefix(key, c.Prefix) {
					return "", nil
				}
				name = strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(key, c.Prefix)), "_", "-")
			}
			if fs.Lookup(name) == nil || value == "" {
				return "", nil
			}
			if prev, ok := names[name]; ok && c.Aliases[prev] == "" {
				return "", nil // the variable of the rule wins over an alias
			}
			names[name] = key
			return name, value
		},
	}
	if err := k.Load(env.Provider("\x00", opt), nil); err != nil {
		return nil, nil, fmt.Errorf("environment: %w", err)
	}
	return k, names, nil
}

// set sets a flag from a file's or the environment's value: a list sets
// a repeatable flag once per element.
func set(fs *flag.FlagSet, name string, v any) error {
	if list, ok := v.([]any); ok {
		for _, e := range list {
			if err := fs.Set(name, fmt.Sprint(e)); err != nil {
				return err
			}
		}
		return nil
	}
	return fs.Set(name, fmt.Sprint(v))
}

func skipped(skip []string, name string) bool {
	for _, s := range skip {
		if s == name {
			return true
		}
	}
	return false
}

// Setting is one flag's effective value.
type Setting struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source Source `json:"source"`
}

// secretName matches the flags whose values are secrets themselves (not
// paths to them).
var secretName = regexp.MustCompile(`secret|token|password`)

// Effective lists every flag of fs (but skip) with its value and source,
// in fs's order, secrets masked: a secret flag's value, and the password
// of a URL.
func Effective(fs *flag.FlagSet, src Sources, skip ...string) []Setting {
	var out []Setting
	fs.VisitAll(func(f *flag.Flag) {
		if skipped(skip, f.Name) {
			return
		}
		s := src[f.Name]
		if s == "" {
			s = FromDefault
		}
		out = append(out, Setting{Name: f.Name, Value: mask(f.Name, f.Value.String()), Source: s})
	})
	return out
}

func mask(name, v string) string {
	if v == "" {
		return v
	}
	if secretName.MatchString(name) {
		return "****"
	}
	var parts []string
	for _, p := range strings.Split(v, ",") {
		if u, err := url.Parse(p); err == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				p = strings.Replace(p, ":"+pw+"@", ":****@", 1)
			}
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ",")
}
