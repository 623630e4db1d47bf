package infra

import "testing"

// TestHistoryWithin: the history depth a state budget leaves: (3+n) checkpoints within the
// budget, 0 when not even one entry fits or without a budget.
func TestHistoryWithin(t *testing.T) {
	for _, tc := range []struct {
		budget, state int64
		want          int
	}{
		{budget: 0, state: 1 << 20, want: 0},
		{budget: 16 << 20, state: 0, want: 0},
		{budget: 4 << 20, state: 1 << 20, want: 1},
		{budget: 4<<20 - 1, state: 1 << 20, want: 0},
		{budget: 16 << 20, state: 2 << 20, want: 5},
		{budget: 16 << 20, state: 50 << 10, want: 324},
		{budget: 1 << 62, state: 1, want: 1 << 20},
	} {
		if got := HistoryWithin(tc.budget, tc.state); got != tc.want {
			t.Errorf("HistoryWithin(%d, %d) = %d, want %d", tc.budget, tc.state, got, tc.want)
		}
	}
}
