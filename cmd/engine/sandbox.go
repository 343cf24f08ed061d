package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/paddock-dev/paddock/client"
	"github.com/paddock-dev/paddock/cmd/internal/bytesize"
	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
)

// dial connects the CLI to a Paddock deployment.
func dial(g *globals) (*nats.Conn, *client.Client, error) {
	nc, creds, err := client.Connect(client.ConnectOptions{URL: g.server, Creds: g.creds, TLSCA: g.tlsCA, Name: "paddock-cli"})
	if err != nil {
		return nil, nil, err
	}
	g.who = creds
	if creds != nil && creds.Tenant != "" {
		// A client's (or a tenant auditor's) credentials are its tenant.
		if g.tenantSet && g.tenant != creds.Tenant {
			nc.Close()
			return nil, nil, errcode.New(errcode.PermissionDenied, "the credentials of %s are for tenant %s, not %s", creds.Name, creds.Tenant, g.tenant)
		}
		g.tenant = creds.Tenant
	}
	c, err := client.New(nc, client.Options{Tenant: g.tenant, Actor: "cli"})
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, c, nil
}

func sandbox(ctx context.Context, base globals, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError{2}
	}
	sub, args := args[0], args[1:]
	if sub == "list" || sub == "inspect" {
		return sandboxRead(ctx, base, sub, args, stdout, stderr)
	}
	if sub == "proc" {
		return sandboxProc(ctx, base, args, stdin, stdout, stderr)
	}
	if sub == "shell" {
		return sandboxShell(ctx, base, args, stdin, stdout, stderr)
	}
	if sub == "fork" {
		return sandboxFork(ctx, base, args, stdout, stderr)
	}
	if sub == "diff" {
		return sandboxDiff(ctx, base, args, stdout, stderr)
	}
	if sub == "persist" || sub == "hydrate" || sub == "resume" || sub == "checkpoint" {
		return sandboxWorkspace(ctx, base, sub, args, stdin, stdout, stderr)
	}
	var g globals
	fs := newFlagSet("sandbox "+sub, stderr)
	g.register(fs, base)
	var (
		jsonOut   = new(bool)
		env       = kvFlag{}
		secretEnv = kvFlag{}
		labels    = kvFlag{}
		nodeLabel = kvFlag{}
		runtime   string
		image     string
		cpus      float64
		memory    string
		// stopMemory: stop --memory, a checkpoint that stops the session.
		stopMemory bool
		disk       string
		sessionID  string
		timeout    time.Duration
		cwd        string
		recursive  bool
		force      bool
		parents    bool
		mode       uint
		lifetime   time.Duration
		stream     bool
		expose     portsFlag
		idle       time.Duration
		egress     egressFlags
	)
	fs.BoolVar(jsonOut, "json", false, "print the result as JSON (exec --stream: JSON lines)")
	switch sub {
	case "create":
		fs.StringVar(&runtime, "runtime", "", "runtime: local, docker or gvisor (default: the node's preferred)")
		fs.StringVar(&image, "image", "", "container image (docker runtime)")
		fs.Var(env, "env", "environment variable K=V (repeatable)")
		fs.Var(secretEnv, "secret-env", "secret environment variable K=V, never recorded (repeatable)")
		fs.Var(labels, "label", "label K=V (repeatable)")
		fs.Var(nodeLabel, "node-label", "place only on a node with label K=V (agent-node --labels; repeatable)")
		fs.Float64Var(&cpus, "cpus", 0, "CPU limit")
		fs.StringVar(&memory, "memory", "", "memory limit, e.g. 512m or 2g")
		fs.StringVar(&disk, "disk", "", "disk limit: all the sandbox may write (workspace, /tmp, ...), e.g. 4g (default: the node's)")
		fs.StringVar(&sessionID, "id", "", "session id (default: a new UUID)")
		fs.DurationVar(&lifetime, "lifetime", 0, "shut the session down this long after its create (default: the operator's)")
		fs.DurationVar(&idle, "idle-timeout", 0, "stop the session after this long with no operation and no running process (default: the operator's)")
		fs.Var(&expose, "expose", "expose a port of the sandbox: engine sandbox port ID PORT gives its address (repeatable, or 8080,3000)")
		egress.register(fs, "create")
	case "port":
	case "exec":
		fs.DurationVar(&timeout, "timeout", 0, "kill the command after this long (default 10m)")
		fs.Var(env, "env", "environment variable K=V for this command (repeatable)")
		fs.StringVar(&cwd, "cwd", "", "working directory, a workspace path")
		fs.BoolVar(&stream, "stream", false, "print the output as it comes (the default when stdout is a terminal)")
	case "write":
		fs.UintVar(&mode, "mode", 0o644, "file mode")
	case "ls":
	case "rm":
		fs.BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
		fs.BoolVarP(&force, "force", "f", false, "a missing path is no error")
	case "mkdir":
		fs.BoolVarP(&parents, "parents", "p", false, "make parent directories as needed; no error if it exists")
	case "stop":
		fs.BoolVar(&stopMemory, "memory", false, "checkpoint the processes and their memory with the workspace (runsc runtime; = sandbox checkpoint)")
	case "read", "running", "start", "shutdown", "delete":
	default:
		return usageErr("unknown sandbox command %q (see engine help)", sub)
	}
	pos, rest, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	want := map[string][2]int{ // min, max positional args
		"create": {0, 0}, "exec": {1, 1}, "write": {2, 2}, "read": {2, 2}, "ls": {1, 2},
		"rm": {2, 2}, "mkdir": {2, 2}, "running": {1, 1}, "start": {1, 1}, "stop": {1, 1},
		"shutdown": {1, 1}, "delete": {1, 1}, "port": {2, 2},
	}[sub]
	if len(pos) < want[0] || len(pos) > want[1] {
		return usageErr("sandbox %s takes %d to %d arguments, got %d (see engine help)", sub, want[0], want[1], len(pos))
	}
	if rest != nil && sub != "exec" {
		return usageErr("sandbox %s takes no command after --", sub)
	}
	nc, c, err := dial(&g)
	if err != nil {
		return err
	}
	defer nc.Close()

	switch sub {
	case "create":
		spec := commands.CreateArgs{
			SessionID: sessionID, Runtime: runtime, Image: image, Env: env, SecretEnv: secretEnv,
			Labels: labels, NodeLabels: nodeLabel, CPUs: cpus, LifetimeS: int64(lifetime.Round(time.Second) / time.Second),
			ExposedPorts: expose, IdleTimeoutS: int64((idle + time.Second - 1) / time.Second),
		}
		if idle < 0 {
			return usageErr("--idle-timeout %s is negative", idle)
		}
		if spec.Egress, err = egress.policy(); err != nil {
			return err
		}
		if lifetime > 0 && spec.LifetimeS == 0 {
			spec.LifetimeS = 1
		}
		if memory != "" {
			if spec.MemoryBytes, err = bytesize.Parse(memory); err != nil {
				return err
			}
		}
		if disk != "" {
			if spec.DiskBytes, err = bytesize.Parse(disk); err != nil {
				return err
			}
			if spec.DiskBytes == 0 {
				return usageErr("--disk 0: give a size, e.g. 4g (leave it out for the node's default)")
			}
		}
		res, err := c.Create(ctx, spec)
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, res)
		}
		fmt.Fprintln(stdout, res.SessionID)
		return nil
	case "exec":
		if len(rest) == 0 {
			return usageErr("sandbox exec needs a command after --")
		}
		args := commands.ExecArgs{Argv: rest, TimeoutMS: timeout.Milliseconds(), Env: env, Cwd: cwd}
		if stream || isTerminal(stdout) && !*jsonOut {
			res, err := c.ExecStream(ctx, pos[0], args, func(e bool, p []byte) {
				if *jsonOut {
					_ = printJSONLine(stdout, outputChunk(e, p))
					return
				}
				if e {
					_, _ = stderr.Write(p)
				} else {
					_, _ = stdout.Write(p)
				}
			})
			if err != nil {
				return err
			}
			if *jsonOut {
				if err := printJSONLine(stdout, res); err != nil {
					return err
				}
			}
			if res.ExitCode != 0 {
				return exitError{res.ExitCode}
			}
			return nil
		}
		res, err := c.Exec(ctx, pos[0], args)
		if err != nil {
			return err
		}
		if *jsonOut {
			if err := printJSON(stdout, res); err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return exitError{res.ExitCode}
			}
			return nil
		}
		out, err := res.StdoutBytesKept()
		if err != nil {
			return err
		}
		errOut, err := res.StderrBytesKept()
		if err != nil {
			return err
		}
		_, _ = stdout.Write(out)
		_, _ = stderr.Write(errOut)
		if res.StdoutTruncated || res.StderrTruncated {
			fmt.Fprintf(stderr, "paddock: output truncated (stdout %d bytes, stderr %d bytes in all)\n", res.StdoutBytes, res.StderrBytes)
		}
		if res.ExitCode != 0 {
			return exitError{res.ExitCode}
		}
		return nil
	case "write":
		// Content streams: over the inline limit it goes through the
		// workspace bucket in chunks.
		pr := startProgress(stderr, "write "+pos[1], true)
		res, err := c.WriteFrom(ctx, pos[0], pos[1], pr.Reader(stdin), fs0(mode))
		pr.done()
		if err != nil || !*jsonOut {
			return err
		}
		return printJSON(stdout, struct {
			Session string `json:"session_id"`
			Path    string `json:"path"`
			commands.WriteResult
		}{pos[0], pos[1], res})
	case "read":
		pr := startProgress(stderr, "read "+pos[1], true)
		if *jsonOut {
			var b bytes.Buffer
			n, err := c.ReadTo(ctx, pos[0], pos[1], pr.Writer(&b))
			pr.done()
			if err != nil {
				return err
			}
			return printJSON(stdout, readResult{Session: pos[0], Path: pos[1], Bytes: n, Content: b.Bytes()})
		}
		_, err := c.ReadTo(ctx, pos[0], pos[1], pr.Writer(stdout))
		pr.done()
		return err
	case "ls":
		p := ""
		if len(pos) == 2 {
			p = pos[1]
		}
		entries, err := c.List(ctx, pos[0], p)
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, entries)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		for _, e := range entries {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", modeString(e), e.Size, formatTime(e.ModTime), e.Name)
		}
		return tw.Flush()
	case "rm":
		if err := c.Remove(ctx, pos[0], pos[1], recursive, force); err != nil || !*jsonOut {
			return err
		}
		return printJSON(stdout, pathResult{Session: pos[0], Path: pos[1], Status: "removed"})
	case "mkdir":
		if err := c.Mkdir(ctx, pos[0], pos[1], parents); err != nil || !*jsonOut {
			return err
		}
		return printJSON(stdout, pathResult{Session: pos[0], Path: pos[1], Status: "created"})
	case "port":
		port, err := strconv.Atoi(pos[1])
		if err != nil || port < 1 || port > 65535 {
			return usageErr("sandbox port: %q is not a port (1 to 65535)", pos[1])
		}
		res, err := c.Port(ctx, pos[0], port)
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, res)
		}
		fmt.Fprintln(stdout, net.JoinHostPort(res.Host, strconv.Itoa(res.Port)))
		return nil
	case "running":
		ok, err := c.Running(ctx, pos[0])
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, struct {
				Session string `json:"session_id"`
				Running bool   `json:"running"`
			}{pos[0], ok})
		}
		fmt.Fprintln(stdout, ok)
		return nil
	default: // start, stop, shutdown, delete
		if sub == "stop" && stopMemory {
			return checkpoint(ctx, c, pos[0], false, *jsonOut, stdout, stderr)
		}
		if err := c.Do(ctx, pos[0], commands.Op(sub), nil, nil); err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(stdout, statusResult{Session: pos[0], Status: doneStatus[sub]})
		}
		fmt.Fprintln(stdout, pos[0])
		return nil
	}
}

func fs0(mode uint) fs.FileMode { return fs.FileMode(mode) & fs.ModePerm }

func modeString(e commands.Entry) string {
	m := fs.FileMode(e.Mode) & fs.ModePerm
	switch e.Type {
	case "dir":
		m |= fs.ModeDir
	case "symlink":
		m |= fs.ModeSymlink
	case "other":
		m |= fs.ModeIrregular
	}
	return m.String()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
