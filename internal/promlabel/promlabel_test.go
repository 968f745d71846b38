package promlabel

import (
	"testing"

	"github.com/VictoriaMetrics/metrics"
)

func TestEscape_MakesEveryStringAValidLabelValue(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: "tcp:127.0.0.1:2020", want: "tcp:127.0.0.1:2020"},
		{give: `a"b`, want: `a\"b`},
		{give: `a\b`, want: `a\\b`},
		{give: "a\r\nb", want: "a\r\\nb"},
		{give: "\xff", want: "\xff"},
	}
	for _, tt := range tests {
		got := Escape(tt.give)
		if got != tt.want {
			t.Errorf("Escape(%q) = %q; want %q", tt.give, got, tt.want)
		}
		if err := metrics.ValidateMetric(`m{service="` + got + `"}`); err != nil {
			t.Errorf("Escape(%q) = %q: not a valid series name: %v", tt.give, got, err)
		}
	}
}
