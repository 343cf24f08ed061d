// Package docs_test checks that docs/architecture.md, the contract a
// third-party client is written against, says what the code does: its
// generated tables (ops, error codes, event data) equal what the registry
// and the types give, its subject table names every subject the code
// builds, and every JSON example decodes strictly as the type it shows.
// Run `go test ./docs -update` to rewrite the generated tables.
package docs_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"

	"github.com/paddock-dev/paddock/auth"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/testenv"
)

var update = flag.Bool("update", false, "rewrite the generated sections of architecture.md")

const doc = "architecture.md"

// generated returns the text of each generated section, by document.
func generated() map[string]map[string]string {
	return map[string]map[string]string{
		doc: {
			"ops":        opsTable(),
			"errors":     errorsTable(),
			"event-data": eventDataTable(),
		},
		"security.md": {"permissions": permissionsTable()},
	}
}

func TestGeneratedTables(t *testing.T) {
	for doc, sections := range generated() {
		checkGenerated(t, doc, sections)
	}
}

func checkGenerated(t *testing.T, doc string, sections map[string]string) {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for name, want := range sections {
		begin, end := "<!-- BEGIN GENERATED: "+name+" -->\n", "<!-- END GENERATED: "+name+" -->"
		i, j := strings.Index(text, begin), strings.Index(text, end)
		if i < 0 || j < i {
			t.Fatalf("%s has no generated section %q", doc, name)
		}
		got := text[i+len(begin) : j]
		if got != want {
			if *update {
				text = text[:i+len(begin)] + want + text[j:]
				continue
			}
			t.Errorf("the %s table of %s differs from the code (go test ./docs -update rewrites it):\n%s", name, doc, testenv.FirstDiff(got, want))
		}
	}
	if *update {
		if err := os.WriteFile(doc, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// permissionsTable is each role's NATS permissions, as auth gives them.
func permissionsTable() string {
	const key = "UKEY" // stands for the identity's public key
	var b strings.Builder
	b.WriteString("| role | account | may publish | may not publish | may subscribe | answers requests |\n|---|---|---|---|---|---|\n")
	list := func(s *auth.SubjectPermission, allow bool) string {
		if s == nil {
			if allow {
				return "everything in its account"
			}
			return "-"
		}
		v := s.Deny
		if allow {
			v = s.Allow
		}
		if len(v) == 0 {
			return "-"
		}
		return "`" + strings.Join(v, "` `") + "`"
	}
	for _, id := range []auth.Identity{
		{Name: "engine", Role: auth.RoleEngine, PublicKey: key},
		{Name: "admin", Role: auth.RoleAdmin, PublicKey: key},
		{Name: "<node>", Role: auth.RoleNode, PublicKey: key},
		{Name: "alice", Role: auth.RoleClient, Tenant: "<tenant>", PublicKey: key},
		{Name: "<name>", Role: auth.RoleAuditor, Tenant: "<tenant>", PublicKey: key},
		{Name: "<name>", Role: auth.RoleAuditor, PublicKey: key},
	} {
		p := auth.PermissionsOf(id)
		if p == nil {
			p = &auth.Permissions{AllowResponses: true}
		}
		role := string(id.Role)
		if id.Role == auth.RoleAuditor {
			role += map[bool]string{true: " (one tenant)", false: " (every tenant)"}[id.Tenant != ""]
		}
		var deny *auth.SubjectPermission
		if p.Publish != nil {
			deny = p.Publish
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %v |\n", role, id.Account(), list(p.Publish, true), list(deny, false), list(p.Subscribe, true), map[bool]string{true: "yes", false: "no"}[p.AllowResponses])
	}
	return b.String()
}

// TestSubjectTable: the subject table names every subject the code builds,
// and nothing else.
func TestSubjectTable(t *testing.T) {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := commands.Subjects{}
	e := events.Subjects{}
	want := []string{
		s.Create("<tenant>"), s.Lookup("<tenant>"), s.Resume("<tenant>"), s.Delete("<tenant>"), s.Fork("<tenant>"),
		s.Upload("<tenant>"), s.Download("<tenant>"), s.Transfer("<tenant>", "<id>"),
		s.Session("<tenant>", "<session>", "<op>"),
		s.Node("<node>", "create"), s.Node("<node>", "resume"), s.Node("<node>", "ping"),
		s.Node("<node>", commands.NodeCordon), s.Node("<node>", commands.NodeUncordon), s.Node("<node>", commands.NodeRelease),
		s.AuditConsumer("<auditor>", ""), s.AuditConsumer("<auditor>", "<tenant>"),
		s.Announce(), s.Heartbeat("<node>"),
		e.Session("<tenant>", "<session>", "<op>", "<phase>"), e.Node("<node>", "<kind>"),
	}
	table := section(t, string(b), "## Subjects")
	var got []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(table, -1) {
		got = append(got, m[1])
	}
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Errorf("subject table = %v\nwant %v", got, want)
	}
}

// TestExamples decodes every JSON example of the doc as what it says it
// is: a request strictly through DecodeRequest and the op's Validate, a
// reply strictly as a Reply whose result is the op's result type, an event
// strictly as an events.Event whose data is its op's data type. Every op
// has a request and a reply example.
func TestExamples(t *testing.T) {
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	specs := map[string]commands.Spec{}
	for _, sp := range commands.Specs() {
		specs[sp.Subject+" "+string(sp.Op)] = sp
	}
	re := regexp.MustCompile("(?s)<!-- example: (\\w+) (\\w+) (request|reply|event) -->\n```json\n(.*?)```")
	seen := map[string]bool{}
	strict := jsonv2.RejectUnknownMembers(true)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		subject, op, kind, body := m[1], m[2], m[3], []byte(m[4])
		name := subject + " " + op + " " + kind
		seen[name] = true
		sp, ok := specs[subject+" "+op]
		if !ok && kind != "event" {
			t.Errorf("example %q: no such op", name)
			continue
		}
		switch kind {
		case "request":
			var args any
			if sp.Args != nil {
				args = reflect.New(reflect.TypeOf(sp.Args)).Interface()
			}
			if _, err := commands.DecodeRequest(body, args); err != nil {
				t.Errorf("example %q does not decode: %v", name, err)
				continue
			}
			if v, ok := args.(interface{ Validate() error }); ok {
				if err := v.Validate(); err != nil {
					t.Errorf("example %q is not valid: %v", name, err)
				}
			}
		case "reply":
			var rep commands.Reply
			if err := jsonv2.Unmarshal(body, &rep, strict); err != nil {
				t.Errorf("example %q: %v", name, err)
				continue
			}
			if rep.Error != nil {
				if !errcode.Known(rep.Error.Code) || rep.Error.Retryable != rep.Error.Code.Retryable() {
					t.Errorf("example %q: error %+v is not in the registry as shown", name, rep.Error)
				}
				continue
			}
			if sp.Result == nil {
				if string(rep.Result) != "{}" {
					t.Errorf("example %q: %s has no result, want {}", name, op)
				}
				continue
			}
			res := reflect.New(reflect.TypeOf(sp.Result)).Interface()
			if err := jsonv2.Unmarshal(rep.Result, res, strict); err != nil {
				t.Errorf("example %q: result: %v", name, err)
			}
		case "event":
			var ev events.Event
			if err := jsonv2.Unmarshal(body, &ev, strict); err != nil {
				t.Errorf("example %q: %v", name, err)
				continue
			}
			if err := ev.CheckVersion(); err != nil || ev.Op != op || string(ev.Phase) != subject {
				t.Errorf("example %q: version %d, op %s, phase %s (%v)", name, ev.Version, ev.Op, ev.Phase, err)
			}
			if d := events.NewData(ev.Op, ev.Phase); d != nil && len(ev.Data) > 0 {
				if err := jsonv2.Unmarshal(ev.Data, d, strict); err != nil {
					t.Errorf("example %q: data: %v", name, err)
				}
			}
		}
	}
	for key := range specs {
		for _, kind := range []string{"request", "reply"} {
			if !seen[key+" "+kind] {
				t.Errorf("%s has no example of the %s %s", doc, key, kind)
			}
		}
	}
}

// section returns the text of a heading's section, up to the next heading
// of the same level.
func section(t *testing.T, text, heading string) string {
	t.Helper()
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("%s has no %q", doc, heading)
	}
	rest := text[i+len(heading)+2:]
	level := strings.Fields(heading)[0]
	if j := strings.Index(rest, "\n"+level+" "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func opsTable() string {
	var b strings.Builder
	b.WriteString("| op | subject | args | result |\n|---|---|---|---|\n")
	for _, sp := range commands.Specs() {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", sp.Op, sp.Subject, fields(sp.Args), fields(sp.Result))
	}
	return b.String()
}

func errorsTable() string {
	codes := errcode.Codes()
	slices.Sort(codes)
	var b strings.Builder
	b.WriteString("| code | retryable | meaning |\n|---|---|---|\n")
	for _, c := range codes {
		r := "no"
		if c.Retryable() {
			r = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", c, r, c.Description())
	}
	return b.String()
}

func eventDataTable() string {
	var b strings.Builder
	b.WriteString("| op | start data | finish data |\n|---|---|---|\n")
	ops := append([]commands.Op{commands.OpCreate}, commands.SessionOps...)
	ops = append(ops, commands.RecordedOps...)
	for _, op := range ops {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", op, dataFields(op, events.PhaseStart), dataFields(op, events.PhaseFinish))
	}
	return b.String()
}

func dataFields(op commands.Op, ph events.Phase) string {
	d := events.NewData(string(op), ph)
	if d == nil {
		return "none"
	}
	return reflect.TypeOf(d).Elem().Name() + ": " + fields(reflect.ValueOf(d).Elem().Interface())
}

// fields lists a struct's JSON members: name, JSON type, and ? when
// optional (omitempty).
func fields(v any) string {
	if v == nil {
		return "none"
	}
	var out []string
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if f.Anonymous && tag == "" {
				walk(f.Type)
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			opt := ""
			if strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero") {
				opt = "?"
			}
			out = append(out, fmt.Sprintf("`%s%s` %s", name, opt, jsonType(f.Type)))
		}
	}
	walk(reflect.TypeOf(v))
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

var timeType = reflect.TypeOf(time.Time{})

func jsonType(t reflect.Type) string {
	if t == timeType {
		return "time"
	}
	if t == reflect.TypeOf(json.RawMessage{}) {
		return "object"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return jsonType(t.Elem())
	case reflect.Bool:
		return "bool"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint32, reflect.Uint64:
		return "int"
	case reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "base64"
		}
		return "[" + jsonType(t.Elem()) + "]"
	case reflect.Map:
		return "{string: " + jsonType(t.Elem()) + "}"
	case reflect.Struct:
		return t.Name()
	}
	return t.String()
}
