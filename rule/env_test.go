package rule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultsFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    Defaults
		wantErr []string // variables the error names
	}{
		{name: "empty", env: nil, want: Defaults{}},
		{name: "set", env: map[string]string{EnvNoneHashSeed: "42", EnvPrefillTimeout: " 180 ", EnvDecodeTimeout: "5", EnvStreamIdle: "0"},
			want: Defaults{NoneHashSeed: "42", NoneHashSeedSet: true, PrefillTimeout: 180 * time.Second, DecodeTimeout: 5 * time.Second, StreamIdleTimeout: -1}},
		{name: "prefill 0 is refused", env: map[string]string{EnvPrefillTimeout: "0"}, wantErr: []string{EnvPrefillTimeout}},
		{name: "every bad value at once", env: map[string]string{EnvPrefillTimeout: "abc", EnvDecodeTimeout: "100000", EnvStreamIdle: "-1"},
			wantErr: []string{EnvPrefillTimeout, EnvDecodeTimeout, EnvStreamIdle}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DefaultsFromEnv(func(k string) string { return tt.env[k] }, 3)
			if len(tt.wantErr) > 0 {
				if !errors.Is(err, ErrEnv) {
					t.Fatalf("err %v; want ErrEnv", err)
				}
				for _, v := range tt.wantErr {
					if !strings.Contains(err.Error(), v) {
						t.Errorf("err %q does not name %s", err, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.OriginErrThreshold == nil || *got.OriginErrThreshold != 3 {
				t.Errorf("origin threshold %v; want 3", got.OriginErrThreshold)
			}
			got.OriginErrThreshold = nil
			if got != tt.want {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}
