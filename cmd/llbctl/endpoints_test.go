package main

import (
	"strings"
	"testing"
)

func TestParseEndpoint(t *testing.T) {
	tests := []struct {
		give    string
		want    endpointSpec
		wantErr string
	}{
		{give: "10.0.0.1:1", want: endpointSpec{ip: "10.0.0.1", weight: 1, role: -1, nixl: -1}},
		{give: "10.0.0.1:8100:3", want: endpointSpec{ip: "10.0.0.1", port: 8100, weight: 3, role: -1, nixl: -1}},
		{give: "10.0.0.1:1:prefill", want: endpointSpec{ip: "10.0.0.1", weight: 1, role: 1, nixl: -1}},
		{give: "10.0.0.1:1:decode:5600", want: endpointSpec{ip: "10.0.0.1", weight: 1, role: 2, nixl: 5600}},
		{give: "127.0.0.1:8100:1:prefill", want: endpointSpec{ip: "127.0.0.1", port: 8100, weight: 1, role: 1, nixl: -1}},
		{give: "127.0.0.1:8200:1:Decode:5601", want: endpointSpec{ip: "127.0.0.1", port: 8200, weight: 1, role: 2, nixl: 5601}},
		{give: "127.0.0.1:8000:1:none", want: endpointSpec{ip: "127.0.0.1", port: 8000, weight: 1, role: 0, nixl: -1}},
		{give: " 10.0.0.1:0 ", want: endpointSpec{ip: "10.0.0.1", weight: 0, role: -1, nixl: -1}},
		{give: "[2001:db8::1]:1", want: endpointSpec{ip: "2001:db8::1", weight: 1, role: -1, nixl: -1}},
		{give: "[2001:db8::1]:8100:1:prefill:5600", want: endpointSpec{ip: "2001:db8::1", port: 8100, weight: 1, role: 1, nixl: 5600}},
		{give: "4ffe::1:1", want: endpointSpec{ip: "4ffe::1", weight: 1, role: -1, nixl: -1}},
		{give: "10.0.0.1", wantErr: "no weight"},
		{give: "10.0.0.1:", wantErr: `"" is neither a number nor a role`},
		{give: "host.example:1", wantErr: `"host.example" is not an IP address`},
		{give: "10.0.0.1:300", wantErr: "weight: 300 is outside 0–255"},
		{give: "10.0.0.1:0:1", wantErr: "port: 0 is outside 1–65535"},
		{give: "10.0.0.1:70000:1", wantErr: "port: 70000 is outside 1–65535"},
		{give: "10.0.0.1:1:2:3", wantErr: "too many fields"},
		{give: "10.0.0.1:1:prefill:5600:1", wantErr: "only a NIXL port may follow the role"},
		{give: "10.0.0.1:1:prefill:decode", wantErr: "two roles"},
		{give: "10.0.0.1:1:prefill:99999", wantErr: "NIXL port: 99999 is outside 0–65535"},
		{give: "10.0.0.1:prefill", wantErr: "no weight"},
		{give: "[2001:db8::1", wantErr: "unclosed ["},
		{give: "[2001:db8::1]", wantErr: "a weight must follow the address"},
		{give: "[::1]x:1", wantErr: "a weight must follow the address"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := parseEndpoint(tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v; want %+v", err, tt.want)
			}
			if got != tt.want {
				t.Errorf("got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestParsePortPair(t *testing.T) {
	tests := []struct {
		give    string
		want    portPair
		wantErr string
	}{
		{give: "2020", want: portPair{port: 2020}},
		{give: "2020:8100", want: portPair{port: 2020, target: 8100}},
		{give: "8080-8081:80", want: portPair{port: 8080, portMax: 8081, target: 80}},
		{give: "8080-8080:80", want: portPair{port: 8080, target: 80}},
		{give: "8081-8080:80", wantErr: "the range ends before it starts"},
		{give: "0:80", wantErr: "port: 0 is outside 1–65535"},
		{give: "80:0", wantErr: "target port: 0 is outside 1–65535"},
		{give: "http:80", wantErr: `port: "http" is not an integer`},
		{give: "80:8000-8001", wantErr: "a target port range is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			got, err := parsePortPair("tcp", tt.give)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
