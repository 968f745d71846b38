package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
)

// API keys and tenant limits, with loxicmd's command names and flags:
//
//	llbctl create apikey --tenant-id=T [--name=N] [--models=a,b] [--rps=R] [--burst=B] [--tokens-per-min=M] [--class=C] [--enabled=false] [--expires-at=RFC3339]
//	llbctl get apikey [<key id>] [--tenant-id=T]
//	llbctl set apikey <key id> [--enabled=…] [--models=…] [--rps=…] [--burst=…] [--tokens-per-min=…] [--class=…]
//	llbctl delete apikey <key id>
//	llbctl set ratelimit --tenant-id=T --rps=R --tokens-per-min=M
//	llbctl get ratelimit [<tenant id>]

const (
	apikeyPath    = "/netlox/v1/config/ai/apikey"
	ratelimitPath = "/netlox/v1/config/ai/tenant/ratelimit"
)

// keyFlags are the flags of create and set apikey.
type keyFlags struct {
	tenant, name, models, class, expires string
	rps, burst, tpm                      int64
	enabled                              bool
}

func (k *keyFlags) register(c *cobra.Command, create bool) {
	f := c.Flags()
	if create {
		f.StringVar(&k.tenant, "tenant-id", "", "tenant that owns the key (required)")
		f.StringVar(&k.name, "name", "", "a label for the key")
		f.StringVar(&k.expires, "expires-at", "", "expiry, RFC 3339 (e.g. 2027-01-01T00:00:00Z)")
	}
	f.StringVar(&k.models, "models", "", "models the key may use, comma-separated (empty: every model)")
	f.Int64Var(&k.rps, "rps", 0, "requests per second (0: no limit)")
	f.Int64Var(&k.burst, "burst", 0, "burst size above the rate (0: the rate)")
	f.Int64Var(&k.tpm, "tokens-per-min", 0, "prompt plus completion tokens per minute (0: no limit)")
	f.StringVar(&k.class, "class", "", "priority class of the key's requests: critical, standard or sheddable")
	f.BoolVar(&k.enabled, "enabled", true, "whether the key authenticates")
}

func splitModels(s string) []string {
	out := []string{}
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

func (a *app) createAPIKeyCmd() *cobra.Command {
	var k keyFlags
	c := &cobra.Command{
		Use:   "apikey --tenant-id <tenant> [--name N] [--models a,b] [--rps R] [--burst B] [--tokens-per-min M] [--class C]",
		Short: "Create an API key (POST " + apikeyPath + "); the raw key is shown once",
		Long: `Create an API key for a tenant. llbd answers the raw key (lxb_…) this once and
keeps only its SHA-256: store it now. Clients send it as X-Api-Key (or
Authorization: Bearer lxb_…) to rules with sse_mode, which check keys as soon as
llbd holds one.`,
		Example: `  llbctl create apikey --tenant-id=team-a --name=prod --models=llama-70b --rps=50 --burst=100 --tokens-per-min=100000
  llbctl create apikey --tenant-id=batch --class=sheddable -o json`,
		Args: usageArgs(cobra.NoArgs, "llbctl create apikey --tenant-id <tenant> ..."),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(k.tenant) == "" {
				return usagef("create apikey: tenant-id is required (--tenant-id)")
			}
			body := map[string]any{"tenant_id": k.tenant, "name": k.name, "allowed_models": splitModels(k.models),
				"rate_limit_rps": k.rps, "burst_size": k.burst, "tokens_per_min": k.tpm, "enabled": k.enabled}
			if k.class != "" {
				body["class"] = k.class
			}
			if k.expires != "" {
				if _, err := time.Parse(time.RFC3339, k.expires); err != nil {
					return usagef("--expires-at %q: want RFC 3339, e.g. 2027-01-01T00:00:00Z", k.expires)
				}
				body["expires_at"] = k.expires
			}
			res, err := a.send("create apikey", http.MethodPost, apikeyPath, body, errorOpts{})
			if err != nil {
				return err
			}
			if a.opts.output == outputJSON {
				return writeJSON(a.stdout, res)
			}
			var out restapi.APIKeyCreateResponse
			if err := decode("create apikey", res, &out); err != nil {
				return err
			}
			t := newTable("KEY ID", "RAW KEY (shown once)")
			t.add(out.KeyID, out.RawKey)
			return t.render(a.stdout)
		},
	}
	k.register(c, true)
	return c
}

func (a *app) setAPIKeyCmd() *cobra.Command {
	var k keyFlags
	c := &cobra.Command{
		Use:   "apikey <key id> [--enabled=false] [--models a,b] [--rps R] [--burst B] [--tokens-per-min M] [--class C]",
		Short: "Change an API key (PATCH " + apikeyPath + "/<key id>)",
		Long: `Change an API key's fields; flags not given keep their value. --enabled=false
disables the key (it stays listed and can be enabled again); delete removes it.`,
		Example: `  llbctl set apikey 3f2a… --enabled=false
  llbctl set apikey 3f2a… --models=llama-70b,mistral-7b --rps=20`,
		Args: usageArgs(cobra.ExactArgs(1), "llbctl set apikey <key id> ..."),
		RunE: func(cmd *cobra.Command, args []string) error {
			f := cmd.Flags()
			body := map[string]any{}
			if f.Changed("enabled") {
				body["enabled"] = k.enabled
			}
			if f.Changed("models") {
				body["allowed_models"] = splitModels(k.models)
			}
			if f.Changed("rps") {
				body["rate_limit_rps"] = k.rps
			}
			if f.Changed("burst") {
				body["burst_size"] = k.burst
			}
			if f.Changed("tokens-per-min") {
				body["tokens_per_min"] = k.tpm
			}
			if f.Changed("class") {
				body["class"] = k.class
			}
			if len(body) == 0 {
				return usagef("set apikey: give at least one of --enabled, --models, --rps, --burst, --tokens-per-min, --class")
			}
			res, err := a.send("set apikey", http.MethodPatch, apikeyPath+"/"+url.PathEscape(args[0]), body,
				errorOpts{hint404: "list the keys with llbctl get apikey"})
			if err != nil {
				return err
			}
			return a.printResult(res)
		},
	}
	k.register(c, false)
	return c
}

func (a *app) deleteAPIKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "apikey <key id>",
		Short:   "Delete an API key for good (DELETE " + apikeyPath + "/<key id>)",
		Example: `  llbctl delete apikey 3f2a…`,
		Args:    usageArgs(cobra.ExactArgs(1), "llbctl delete apikey <key id>"),
		RunE: func(_ *cobra.Command, args []string) error {
			res, err := a.send("delete apikey", http.MethodDelete, apikeyPath+"/"+url.PathEscape(args[0]), nil,
				errorOpts{hint404: "list the keys with llbctl get apikey"})
			if err != nil {
				return err
			}
			return a.printResult(res)
		},
	}
}

func (a *app) getAPIKeyCmd() *cobra.Command {
	var tenant string
	c := &cobra.Command{
		Use:     "apikey [<key id>] [--tenant-id T]",
		Aliases: []string{"apikeys"},
		Short:   "Show API keys (GET " + apikeyPath + "); never the key itself",
		Example: `  llbctl get apikey --tenant-id=team-a
  llbctl get apikey 3f2a… -o json`,
		Args: usageArgs(cobra.MaximumNArgs(1), "llbctl get apikey [<key id>] [--tenant-id T]"),
		RunE: func(_ *cobra.Command, args []string) error {
			var keys []restapi.APIKeySummary
			if len(args) == 1 {
				body, err := a.get("get apikey", apikeyPath+"/"+url.PathEscape(args[0]), nil, errorOpts{hint404: "list the keys with llbctl get apikey"})
				if err != nil {
					return err
				}
				if a.opts.output == outputJSON {
					return writeJSON(a.stdout, body)
				}
				var k restapi.APIKeySummary
				if err := decode("get apikey", body, &k); err != nil {
					return err
				}
				keys = append(keys, k)
			} else {
				var q url.Values
				if tenant != "" {
					q = url.Values{"tenant_id": {tenant}}
				}
				body, err := a.get("get apikey", apikeyPath, q, errorOpts{})
				if err != nil {
					return err
				}
				if a.opts.output == outputJSON {
					return writeJSON(a.stdout, body)
				}
				if err := decode("get apikey", body, &keys); err != nil {
					return err
				}
			}
			t := newTable("KEY ID", "TENANT", "NAME", "MODELS", "RPS", "BURST", "TOKENS/MIN", "CLASS", "ENABLED", "CREATED", "EXPIRES")
			for _, k := range keys {
				exp := "-"
				if k.ExpiresAt != nil {
					exp = k.ExpiresAt.UTC().Format(time.RFC3339)
				}
				t.add(k.KeyID, k.TenantID, orDash(k.Name), orDash(strings.Join(k.AllowedModels, ",")),
					strconv.FormatInt(k.RateLimitRPS, 10), strconv.FormatInt(k.BurstSize, 10), strconv.FormatInt(k.TokensPerMin, 10),
					orDash(k.Class), strconv.FormatBool(k.Enabled), k.CreatedAt.UTC().Format(time.RFC3339), exp)
			}
			return t.render(a.stdout)
		},
	}
	c.Flags().StringVar(&tenant, "tenant-id", "", "only this tenant's keys")
	return c
}

func (a *app) setRateLimitCmd() *cobra.Command {
	var tenant string
	var rps, tpm int64
	c := &cobra.Command{
		Use:   "ratelimit --tenant-id <tenant> [--rps R] [--tokens-per-min M]",
		Short: "Set a tenant's rate limit across its keys (POST " + ratelimitPath + ")",
		Long: `Set a tenant's limits, on top of each key's: requests per second and prompt
plus completion tokens per minute (0: no limit). Replaces what was set.`,
		Example: `  llbctl set ratelimit --tenant-id=team-a --rps=100 --tokens-per-min=500000`,
		Args:    usageArgs(cobra.NoArgs, "llbctl set ratelimit --tenant-id <tenant> ..."),
		RunE: func(_ *cobra.Command, _ []string) error {
			if strings.TrimSpace(tenant) == "" {
				return usagef("set ratelimit: tenant-id is required (--tenant-id)")
			}
			res, err := a.send("set ratelimit", http.MethodPost, ratelimitPath,
				map[string]any{"tenant_id": tenant, "rps": rps, "tokens_per_min": tpm}, errorOpts{})
			if err != nil {
				return err
			}
			return a.printResult(res)
		},
	}
	c.Flags().StringVar(&tenant, "tenant-id", "", "the tenant (required)")
	c.Flags().Int64Var(&rps, "rps", 0, "requests per second across the tenant's keys (0: no limit)")
	c.Flags().Int64Var(&tpm, "tokens-per-min", 0, "tokens per minute across the tenant's keys (0: no limit)")
	return c
}

func (a *app) getRateLimitCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ratelimit [<tenant id>]",
		Aliases: []string{"ratelimits"},
		Short:   "Show tenant rate limits (GET " + ratelimitPath + ")",
		Example: `  llbctl get ratelimit
  llbctl get ratelimit team-a -o json`,
		Args: usageArgs(cobra.MaximumNArgs(1), "llbctl get ratelimit [<tenant id>]"),
		RunE: func(_ *cobra.Command, args []string) error {
			path := ratelimitPath
			if len(args) == 1 {
				path += "/" + url.PathEscape(args[0])
			}
			body, err := a.get("get ratelimit", path, nil, errorOpts{hint404: "this tenant has no limit set"})
			if err != nil {
				return err
			}
			if a.opts.output == outputJSON {
				return writeJSON(a.stdout, body)
			}
			var ls []restapi.TenantRateLimit
			if len(args) == 1 {
				var l restapi.TenantRateLimit
				if err := decode("get ratelimit", body, &l); err != nil {
					return err
				}
				ls = append(ls, l)
			} else if err := decode("get ratelimit", body, &ls); err != nil {
				return err
			}
			t := newTable("TENANT", "RPS", "TOKENS/MIN", "UPDATED")
			for _, l := range ls {
				upd := "-"
				if l.UpdatedAt != nil {
					upd = l.UpdatedAt.UTC().Format(time.RFC3339)
				}
				id := ""
				if l.TenantID != nil {
					id = *l.TenantID
				}
				t.add(id, strconv.FormatInt(l.RPS, 10), strconv.FormatInt(l.TokensPerMin, 10), upd)
			}
			return t.render(a.stdout)
		},
	}
}

// send writes body (JSON; nil for none) with method to path and returns
// the answer's body.
func (a *app) send(op, method, path string, body any, o errorOpts) ([]byte, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	var raw []byte
	if body != nil {
		if raw, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("encoding the request: %w", err)
		}
	}
	res, err := c.do(a.ctx, method, path, nil, raw)
	if err != nil {
		return nil, err
	}
	if err := check(op, res, o); err != nil {
		return nil, err
	}
	return res.body, nil
}
