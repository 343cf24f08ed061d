package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// walk calls f for every command of the tree under c, c included.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, sub := range c.Commands() {
		walk(sub, f)
	}
}

// words is a command's path without the root: "sandbox proc start".
func words(c *cobra.Command) []string {
	return strings.Fields(strings.TrimPrefix(c.CommandPath(), "engine"))
}

// TestEveryCommandAnswersHelp: every command and group of the tree
// answers --help and -h with exit 0, on stdout, with its own usage.
func TestEveryCommandAnswersHelp(t *testing.T) {
	root := newRoot(context.Background(), &[]string{}, streams{})
	n := 0
	walk(root, func(c *cobra.Command) {
		for _, h := range []string{"--help", "-h"} {
			n++
			args := append(words(c), h)
			var out, errb bytes.Buffer
			code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
			if code != 0 || errb.Len() != 0 || !strings.Contains(out.String(), "Usage") {
				t.Errorf("engine %s: exit %d, stdout %q, stderr %q; want 0 and the usage on stdout", strings.Join(args, " "), code, out.String(), errb.String())
			}
		}
	})
	if n < 100 {
		t.Errorf("walked %d help calls; want one per command and group (over 50 commands)", n)
	}
}

// TestEveryLeafTakesJSON: every runnable command declares --json.
func TestEveryLeafTakesJSON(t *testing.T) {
	root := newRoot(context.Background(), &[]string{}, streams{})
	walk(root, func(c *cobra.Command) {
		if c.HasSubCommands() || c.Name() == "help" || c.Parent() != nil && c.Parent().Name() == "completion" {
			return
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("engine %s has no --json", strings.Join(words(c), " "))
		}
	})
}
