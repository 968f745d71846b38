package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/llbproject/llb/simulate/workload"
)

func TestShapeFlags_DefaultsAreTheGenerators(t *testing.T) {
	f := &shapeFlags{}
	opts := workload.Options{Stream: true}
	for _, tt := range []struct {
		kind string
		zero workload.Spec
	}{
		{"shared-prefix", workload.SharedPrefix{Options: opts}},
		{"hot-prefix", workload.HotPrefix{Options: opts}},
		{"multi-turn", workload.MultiTurn{Options: opts}},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			spec, err := f.spec(tt.kind, opts)
			if err != nil {
				t.Fatal(err)
			}
			got, err := workload.NewTrace(workload.TraceConfig{Spec: spec, Requests: 40, Seed: 3, BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			want, err := workload.NewTrace(workload.TraceConfig{Spec: tt.zero, Requests: 40, Seed: 3, BlockSize: 16})
			if err != nil {
				t.Fatal(err)
			}
			for i := range want.Requests {
				if !bytes.Equal(got.Requests[i].Body, want.Requests[i].Body) {
					t.Fatalf("request %d differs from the generator's defaults:\n%.200s\n%.200s", i, got.Requests[i].Body, want.Requests[i].Body)
				}
			}
		})
	}
}

// parseShape parses args into a fresh flag set carrying the shape flags.
func parseShape(t *testing.T, args ...string) (*shapeFlags, *pflag.FlagSet) {
	t.Helper()
	f := &shapeFlags{}
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f, fs
}

func TestShapeFlags_ZipfIsADeprecatedSpellingOfZipfAlpha(t *testing.T) {
	tests := []struct {
		give        []string
		wantAlpha   float64
		wantChanged bool
	}{
		{give: nil, wantAlpha: 0, wantChanged: false},
		{give: []string{"--zipf-alpha", "1.2"}, wantAlpha: 1.2, wantChanged: true},
		{give: []string{"--zipf", "0.8"}, wantAlpha: 0.8, wantChanged: true},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			f, fs := parseShape(t, tt.give...)
			if f.zipfAlpha != tt.wantAlpha || f.zipfChanged(fs) != tt.wantChanged {
				t.Fatalf("got alpha %v changed %v; want %v %v", f.zipfAlpha, f.zipfChanged(fs), tt.wantAlpha, tt.wantChanged)
			}
		})
	}
	_, fs := parseShape(t)
	if z := fs.Lookup("zipf"); !z.Hidden {
		t.Fatal("--zipf is listed in the help; want it hidden")
	}
}

func TestShapeFlags_DeprecatedZipfWarnsOnStderrAndKeepsStdoutJSON(t *testing.T) {
	run := func(zipfFlag string) (stdout, stderr string) {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, &errOut)
		root.SetArgs([]string{"workload", "--kind", "shared-prefix", "-n", "5", zipfFlag, "1.2"})
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("%s: %v", zipfFlag, err)
		}
		return out.String(), errOut.String()
	}
	oldOut, oldErr := run("--zipf")
	newOut, newErr := run("--zipf-alpha")
	if oldOut != newOut {
		t.Fatal("--zipf and --zipf-alpha print different streams")
	}
	if !strings.Contains(oldErr, "--zipf is deprecated; use --zipf-alpha") || newErr != "" {
		t.Fatalf("stderr %q with --zipf, %q with --zipf-alpha; want a warning with --zipf only", oldErr, newErr)
	}
	bf := &benchFlags{}
	cmd := benchCommand(bf, io.Discard, io.Discard)
	if err := cmd.ParseFlags([]string{"--scenario", "shared-prefix-zipf", "--zipf", "0.5"}); err != nil {
		t.Fatal(err)
	}
	b, err := bf.bench(cmd.Flags())
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Scenario.Workload.(workload.SharedPrefix).ZipfAlpha; got != 0.5 {
		t.Fatalf("bench --zipf 0.5 on the zipf preset: alpha %v; want 0.5 (the flag overrides the preset)", got)
	}
}

func TestShapeFlags_MixTakesEitherSeparatorAndBareKinds(t *testing.T) {
	tests := []struct {
		give        string
		wantWeights []float64
		wantErr     string
	}{
		{give: defaultMix, wantWeights: []float64{1, 1, 1}},
		{give: "shared-prefix=2,multi-turn=1", wantWeights: []float64{2, 1}},
		{give: "shared-prefix:3, multi-turn", wantWeights: []float64{3, 1}},
		{give: "hot-prefix", wantWeights: []float64{1}},
		{give: "mix:1", wantErr: "cannot contain a mix"},
		{give: "shared-prefix=x", wantErr: "not a number"},
		{give: "chaos=1", wantErr: `workload "chaos"`},
		{give: "hot-prefix=0", wantErr: "want > 0"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			f, _ := parseShape(t, "--mix", tt.give)
			spec, err := f.spec("mix", workload.Options{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got error %v; want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := spec.(workload.Mix)
			var got []float64
			for _, p := range m.Parts {
				got = append(got, p.Weight)
			}
			if len(got) != len(tt.wantWeights) {
				t.Fatalf("got weights %v; want %v", got, tt.wantWeights)
			}
			for i := range got {
				if got[i] != tt.wantWeights[i] {
					t.Fatalf("got weights %v; want %v", got, tt.wantWeights)
				}
			}
		})
	}
}

func TestShapeFlags_AnswerTokensDefaultToOutputTokens(t *testing.T) {
	tests := []struct {
		give []string
		want int
	}{
		{give: nil, want: 100},
		{give: []string{"--output-tokens", "40"}, want: 40},
		{give: []string{"--output-tokens", "40", "--answer-tokens", "7"}, want: 7},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.give, " "), func(t *testing.T) {
			f, _ := parseShape(t, tt.give...)
			spec, err := f.spec("multi-turn", workload.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if got := spec.(workload.MultiTurn).AnswerTokens; got != tt.want {
				t.Fatalf("got answer tokens %d; want %d", got, tt.want)
			}
		})
	}
}
