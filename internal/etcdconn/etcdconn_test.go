package etcdconn

import (
	"strings"
	"testing"
)

func TestValidate_ReportsEveryProblem(t *testing.T) {
	tests := []struct {
		name string
		give Config
		want []string // substrings of the error; none means valid
	}{
		{name: "ok", give: Config{Endpoints: []string{"http://127.0.0.1:2379"}}},
		{name: "none", give: Config{}, want: []string{"no etcd endpoints"}},
		{name: "bad url and half tls and half auth", give: Config{
			Endpoints: []string{"127.0.0.1:2379"}, CertFile: "c.pem", Username: "u",
		}, want: []string{"not an http:// or https:// URL", "--etcd-cert and --etcd-key", "username and password"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil; want %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q; want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestParseEndpoints_DropsBlanks(t *testing.T) {
	got := ParseEndpoints(" http://a:1, ,http://b:2,")
	if len(got) != 2 || got[0] != "http://a:1" || got[1] != "http://b:2" {
		t.Fatalf("got %q; want [http://a:1 http://b:2]", got)
	}
}

func TestClientConfig_TLSOnlyWhenAsked(t *testing.T) {
	c := Config{Endpoints: []string{"http://127.0.0.1:2379"}}
	cfg, err := c.ClientConfig()
	if err != nil || cfg.TLS != nil {
		t.Fatalf("plain http: TLS=%v err=%v; want nil, nil", cfg.TLS, err)
	}
	c = Config{Endpoints: []string{"https://127.0.0.1:2379"}, ServerName: "etcd"}
	cfg, err = c.ClientConfig()
	if err != nil || cfg.TLS == nil || cfg.TLS.ServerName != "etcd" {
		t.Fatalf("https: TLS=%v err=%v; want a TLS config for server name etcd", cfg.TLS, err)
	}
	c = Config{Endpoints: []string{"https://127.0.0.1:2379"}, CAFile: "/nonexistent/ca.pem"}
	if _, err := c.ClientConfig(); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Fatalf("missing CA: got %v; want a CA file error", err)
	}
}
