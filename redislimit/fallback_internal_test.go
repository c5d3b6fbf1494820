package redislimit

import "testing"

// scaleLimit rounds down, counts a share as written, and never gives 0.
func TestScaleLimit(t *testing.T) {
	for _, c := range []struct {
		limit int
		share float64
		want  int
	}{
		{10, 0.5, 5},
		{10, 1, 10},
		{100, 0.29, 29}, // 28.999999999999996 in floating point
		{10, 0.7, 7},
		{10, 1.0 / 3, 3},
		{3, 0.1, 1}, // 0.3, at least 1
		{1, 0.01, 1},
		{7, 0.5, 3},
		{1<<31 - 1, 1, 1<<31 - 1},
		{1<<31 - 1, 0.5, 1<<30 - 1},
	} {
		if got := scaleLimit(c.limit, c.share); got != c.want {
			t.Errorf("scaleLimit(%d, %v) = %d, want %d", c.limit, c.share, got, c.want)
		}
	}
}
