package main

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// newLogger builds the daemon's logger: zerolog JSON, or the human console
// format for "console", and for "auto" when w is a terminal.
func newLogger(format string, level zerolog.Level, w io.Writer) zerolog.Logger {
	if format == "console" || format == "auto" && isTerminal(w) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.RFC3339}
	}
	return zerolog.New(w).Level(level).With().Timestamp().Logger()
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
