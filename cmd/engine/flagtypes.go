package main

// Type names a flag's value in --help (pflag.Value).
func (f kvFlag) Type() string { return "K=V" }

// Type names a flag's value in --help (pflag.Value).
func (p *portsFlag) Type() string { return "ports" }

// Type names a flag's value in --help (pflag.Value).
func (l *listFlag) Type() string { return "list" }
