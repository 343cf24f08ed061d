package storage

import (
	"context"
	"time"
)

// Decide is decide, for the tests.
var Decide = decide

// Look is one look of the monitor at now, for the tests.
func (m *Monitor) Look(ctx context.Context, now time.Time) { m.look(ctx, now) }
