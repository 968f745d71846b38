package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// sdkDir is the official-SDK client test's package (clients/openai-node).
const sdkDir = "../../clients/openai-node"

// sdkModules returns a directory whose node_modules holds the SDKs of
// sdkDir's package-lock.json: sdkDir itself once `npm ci` ran there, else a
// copy where this test runs `npm ci --ignore-scripts` (from npm's cache
// when it has the packages).
func sdkModules(t *testing.T) string {
	t.Helper()
	installed := func(dir string) bool {
		for _, pkg := range []string{"openai", "@anthropic-ai/sdk"} {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg, "package.json")); err != nil {
				return false
			}
		}
		return true
	}
	if installed(sdkDir) {
		return sdkDir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("node is installed but npm is not: the SDK test needs npm to install %s's packages", sdkDir)
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(sdkDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in a copy of %s: %v\n%s", sdkDir, err, out)
	}
	return dir
}

// TestE2E_OfficialSDKsThroughLLBD drives llbd with the official npm SDKs:
// openai's responses.create (streamed and not, a previous_response_id
// chain, responses.retrieve) and embeddings.create, and @anthropic-ai/sdk's
// messages.create (streamed and not) and messages.stream, in front of two
// simulated vLLM workers (clients/openai-node/test/apis.test.mjs). It skips
// only where node is not installed.
func TestE2E_OfficialSDKsThroughLLBD(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the official SDK test (openai, @anthropic-ai/sdk) needs Node 20 or newer and npm")
	}
	modules := sdkModules(t)
	test, err := filepath.Abs(filepath.Join(sdkDir, "test", "apis.test.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if modules != sdkDir {
		// Node resolves a module from the importing file's directory up:
		// the test file goes beside the installed node_modules.
		b, err := os.ReadFile(test)
		if err != nil {
			t.Fatal(err)
		}
		test = filepath.Join(modules, "apis.test.mjs")
		if err := os.WriteFile(test, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const vip, port = "127.0.26.41", 2026
	startRouteFleet(t, 2, "127.0.26.42", vip, port)
	ports, _ := json.Marshal(map[string]int{"single": port})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", test)
	cmd.Env = append(os.Environ(), "LLB_TEST_VIP="+vip, "LLB_TEST_PORTS="+string(ports), "LLB_TEST_MODEL=sim-model")
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", filepath.Base(test), out)
	if err != nil {
		t.Fatalf("the SDK tests failed: %v", err)
	}
}
