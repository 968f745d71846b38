package inventory

import "time"

// logLimiter lets one log line through per interval and counts the ones it
// held back, so a flood of malformed frames costs one line per interval.
// Time is passed in. Single owner.
type logLimiter struct {
	every      time.Duration
	last       time.Time
	suppressed int
}

// allow reports whether a line may be written at now, and how many lines
// were suppressed since the last one that was.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
