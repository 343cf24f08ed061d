package main

import "time"

// timeLayout is the one time format of human output: RFC 3339 in UTC,
// with milliseconds (fixed width, for tables and the events' order).
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// formatTime formats t with timeLayout ("-" for no time).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout)
}

// formatTimeText is formatTime of a time given as RFC 3339 text (as the
// contract's results carry them); text it cannot parse stays as it is.
func formatTimeText(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return formatTime(t)
}
