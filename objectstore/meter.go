package objectstore

import "strings"

// ByteMeter counts the bytes a Store moves (metrics.Metrics is one):
// direction is "in" (stored) or "out" (read), kind "snapshot" or
// "transfer" (an upload or a download through uploads/).
type ByteMeter interface {
	ObjectBytes(direction, kind string, n int64)
}

// Metered returns a store on the same bucket that counts the bytes it
// moves in m (nil: counts nothing).
func (s *Store) Metered(m ByteMeter) *Store { c := *s; c.meter = m; return &c }

// count records n bytes of object name moved in direction.
func (s *Store) count(direction, name string, n int64) {
	if s.meter == nil || n <= 0 {
		return
	}
	kind := "snapshot"
	if strings.HasPrefix(name, "uploads/") {
		kind = "transfer"
	}
	s.meter.ObjectBytes(direction, kind, n)
}
