package nodes_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/paddock-dev/paddock/commands"
	"github.com/paddock-dev/paddock/errcode"
	"github.com/paddock-dev/paddock/events"
	"github.com/paddock-dev/paddock/nodes"
	"github.com/paddock-dev/paddock/nodes/runtime"
	"github.com/paddock-dev/paddock/testenv"
)

// finishData returns the data of the finish event of the session's first
// op named op.
func finishData[T any](t *testing.T, st *testenv.Stack, id string, op commands.Op) T {
	t.Helper()
	for _, ev := range sessionEvents(t, st, "default", id) {
		if ev.Op == string(op) && ev.Phase == events.PhaseFinish {
			d, err := events.DecodeData[T](ev)
			if err != nil {
				t.Fatal(err)
			}
			return d
		}
	}
	t.Fatalf("no %s finish for %s", op, id)
	var zero T
	return zero
}

// TestDockerDiskLimit: a create asks for a disk; the finish event names
// its bytes and mechanism; writing past it fails inside the sandbox with
// ENOSPC while the node serves on (another session, the event stream); a
// create over the operator's maximum is policy_denied and recorded; a
// persisted, shut-down session resumes with the same disk and its files.
func TestDockerDiskLimit(t *testing.T) {
	image := testenv.SandboxBaseImage(t)
	node := "disk-" + uuid.NewString()[:8]
	rt := dockerRuntime(t, node)
	ds, err := rt.ProbeDisk(t.Context(), image)
	if err != nil {
		t.Fatal(err)
	}
	if ds.Mechanism == runtime.DiskNone {
		t.Skipf("this host offers no disk limit: %s", ds.Why)
	}
	st := testenv.StartStack(t, testenv.StackOptions{NoNode: true})
	ctx := testenv.Context(t, 3*time.Minute)
	startAgent(t, st, nodes.Config{ID: node, Policy: nodes.Policy{MaxDiskBytes: 256 << 20}}, rt)

	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, DiskBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, DiskBytes: 128 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fin := finishData[events.StatusFinish](t, st, s.SessionID, commands.OpCreate)
	if fin.DiskLimit == nil || fin.DiskLimit.Bytes != 64<<20 || fin.DiskLimit.Mechanism != ds.Mechanism {
		t.Fatalf("create finish disk_limit = %+v, want 64 MiB by %s", fin.DiskLimit, ds.Mechanism)
	}

	// The attack: 200 MiB into a 64 MiB disk, in the workspace and /tmp.
	for _, p := range []string{"/workspace/big", "/tmp/big"} {
		res, err := st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "dd if=/dev/zero of=" + p + " bs=1M count=200; rc=$?; rm -f " + p + "; exit $rc"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
			t.Fatalf("dd to %s: exit %d, %q; want ENOSPC", p, res.ExitCode, res.Stderr)
		}
	}
	// The node, the other session and the event stream are unaffected.
	res, err := st.Client.Exec(ctx, bystander.SessionID, commands.ExecArgs{Shell: "dd if=/dev/zero of=/workspace/f bs=1M count=100 2>/dev/null && ls -s /workspace/f"})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("the other session: %+v, %v", res, err)
	}
	if evs := sessionEvents(t, st, "default", s.SessionID); len(evs) < 6 {
		t.Fatalf("%d events for the attacker, want its creates and execs recorded", len(evs))
	}

	// Over the maximum: refused, and recorded.
	_, err = st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, DiskBytes: 512 << 20, SessionID: "too-big"})
	if !errors.Is(err, errcode.ErrPolicyDenied) {
		t.Fatalf("a 512 MiB create on a 256 MiB node: %v, want policy_denied", err)
	}
	evs := sessionEvents(t, st, "default", "too-big")
	if len(evs) != 2 || evs[1].ErrorCode != string(errcode.PolicyDenied) {
		t.Fatalf("the refused create's events: %+v", evs)
	}
	if cs, err := events.DecodeData[events.CreateStart](evs[0]); err != nil || cs.DiskBytes != 512<<20 {
		t.Fatalf("the refused create's start records %+v, %v; want what it asked", cs, err)
	}
	// Bad values are invalid_request.
	for _, n := range []int64{-1, 1, commands.MaxDisk + 1} {
		if _, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "docker", Image: image, DiskBytes: n}); !errors.Is(err, errcode.ErrInvalidRequest) {
			t.Errorf("disk_bytes %d: %v, want invalid_request", n, err)
		}
	}

	// Persist, shut down, resume: a new sandbox with the same disk.
	if _, err := st.Client.WriteFile(ctx, s.SessionID, "kept.txt", []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Client.Persist(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := st.Client.Shutdown(ctx, s.SessionID); err != nil {
		t.Fatal(err)
	}
	if r, err := st.Client.Resume(ctx, s.SessionID, nil); err != nil || r.Epoch != 2 || !r.Restored {
		t.Fatalf("resume = %+v, %v", r, err)
	}
	rf := finishData[events.ResumeFinish](t, st, s.SessionID, commands.OpResume)
	if rf.DiskLimit == nil || rf.DiskLimit.Bytes != 64<<20 || rf.DiskLimit.Mechanism != ds.Mechanism {
		t.Fatalf("resume finish disk_limit = %+v, want 64 MiB by %s", rf.DiskLimit, ds.Mechanism)
	}
	if got, err := st.Client.ReadFile(ctx, s.SessionID, "kept.txt"); err != nil || string(got) != "kept" {
		t.Fatalf("kept.txt after resume = %q, %v", got, err)
	}
	res, err = st.Client.Exec(ctx, s.SessionID, commands.ExecArgs{Shell: "dd if=/dev/zero of=/workspace/big bs=1M count=200"})
	if err != nil || res.ExitCode == 0 || !strings.Contains(string(res.Stderr), "No space left on device") {
		t.Fatalf("dd after resume: %+v, %v; want ENOSPC", res, err)
	}
	for _, id := range []string{s.SessionID, bystander.SessionID} {
		if err := st.Client.Shutdown(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalDiskLimitNone: the local runtime bounds no disk, and its
// creates say so.
func TestLocalDiskLimitNone(t *testing.T) {
	st := testenv.StartStack(t, testenv.StackOptions{})
	ctx := testenv.Context(t, time.Minute)
	s, err := st.Client.Create(ctx, commands.CreateArgs{Runtime: "local", DiskBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fin := finishData[events.StatusFinish](t, st, s.SessionID, commands.OpCreate)
	if fin.DiskLimit == nil || *fin.DiskLimit != (events.DiskLimit{Mechanism: runtime.DiskNone}) {
		t.Fatalf("local create finish disk_limit = %+v, want mechanism none", fin.DiskLimit)
	}
}
