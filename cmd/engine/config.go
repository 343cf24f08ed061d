package main

import (
	"context"
)

func configPrintCmd(ctx context.Context, base globals, args []string, s streams) error {
	fs := newFlagSet("config print", s.err)
	fs.Bool("json", false, "print JSON")
	_, _, err := parseInterleaved(fs, args)
	return err
}
