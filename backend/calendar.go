package backend

import (
	"time"

	"github.com/keyrate/keyrate"
	"github.com/keyrate/keyrate/internal/access"
)

var period = access.Period.(func(keyrate.Calendar, time.Time) (time.Time, time.Time))

// Period returns the period of c that holds t: from start, inclusive, to
// end, exclusive. It is the zero span for the zero Calendar.
func Period(c keyrate.Calendar, t time.Time) (start, end time.Time) {
	return period(c, t)
}
