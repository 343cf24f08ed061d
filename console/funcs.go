package console

import (
	"fmt"
	"html/template"
	"sort"
	"strings"
	"time"

	"github.com/paddock-dev/paddock/commands"
)

// funcs are the templates' helpers. None returns template.HTML: every
// value is escaped where it lands.
var funcs = template.FuncMap{
	"time": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"ms": func(d *float64) string {
		if d == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f ms", *d)
	},
	"int": func(p *int) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	},
	"labels": func(m map[string]string) string {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + m[k]
		}
		return strings.Join(parts, " ")
	},
	"changes": func(c *commands.Changes) string {
		if c == nil {
			return ""
		}
		s := fmt.Sprintf("+%d ~%d -%d (%d bytes, %s)", c.Created, c.Modified, c.Removed, c.BytesWritten, c.Observed)
		for _, p := range c.Paths {
			s += " " + p.Change + ":" + p.Path
		}
		if c.Truncated {
			s += " …"
		}
		return s
	},
	"dash": func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	},
	"percent": func(f float64) string { return fmt.Sprintf("%.1f%%", f) },
}
