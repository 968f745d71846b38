package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
)

// kvInventoryPath is LoxiLB's KV inventory route.
const kvInventoryPath = "/netlox/v1/config/ai/kv/inventory"

// kvInventoryView is the body of GET /config/ai/kv/inventory:
// {service_id, ep_idx, hash_algo, blocks:[{block_idx, hash_uint64}], total}.
// service_id is LoxiLB's numeric rule id and llb's rule key, so it is kept
// raw.
type kvInventoryView struct {
	ServiceID json.RawMessage `json:"service_id"`
	EpIdx     int64           `json:"ep_idx"`
	HashAlgo  string          `json:"hash_algo"`
	Blocks    []struct {
		BlockIdx   int64  `json:"block_idx"`
		HashUint64 uint64 `json:"hash_uint64"`
	} `json:"blocks"`
	Total int64 `json:"total"`
}

func (a *app) getKVCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "kv",
		Short: "Show KV-cache state",
		Args:  usageArgs(cobra.NoArgs, "llbctl get kv inventory --service <id> --ep <idx>"),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	var service string
	var ep, offset, limit int64
	inv := &cobra.Command{
		Use:     "inventory --service <id> --ep <idx>",
		Aliases: []string{"inv"},
		Short:   "Show the KV block hashes llbd mirrors for one endpoint (GET " + kvInventoryPath + ")",
		Long: `Show the KV-cache block hashes llbd has mirrored from one endpoint's
KV-event feed.

--service is the rule as llbd names it: llb's rule key (shown by
"llbctl get lb <ip> <port> <proto>" as "rule key", e.g. tcp:10.10.10.254:2020@10.10.10.254);
LoxiLB takes its numeric service id. --ep is the endpoint index (IDX in
"llbctl get endpoints").`,
		Example: `  llbctl get kv inventory --service tcp:10.10.10.254:2020@10.10.10.254 --ep 0`,
		Args:    usageArgs(cobra.NoArgs, "llbctl get kv inventory --service <id> --ep <idx>"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var missing []string
			if strings.TrimSpace(service) == "" {
				missing = append(missing, "--service")
			}
			if !f.Changed("ep") {
				missing = append(missing, "--ep")
			}
			if len(missing) > 0 {
				return usagef("get kv inventory needs %s", strings.Join(missing, " and "))
			}
			if ep < 0 || ep > 31 {
				return usagef("--ep %d: endpoint indexes are 0–31", ep)
			}
			q := url.Values{"service_id": {service}, "ep_idx": {strconv.FormatInt(ep, 10)}}
			if f.Changed("offset") {
				if offset < 0 {
					return usagef("--offset must not be negative")
				}
				q.Set("offset", strconv.FormatInt(offset, 10))
			}
			if f.Changed("limit") {
				if limit < 1 {
					return usagef("--limit must be at least 1")
				}
				q.Set("limit", strconv.FormatInt(limit, 10))
			}
			return a.showInventory(service, ep, q)
		},
	}
	inv.Flags().StringVar(&service, "service", "", "the rule: llb's rule key (LoxiLB: its service id)")
	inv.Flags().Int64Var(&ep, "ep", 0, "endpoint index in the rule")
	inv.Flags().Int64Var(&offset, "offset", 0, "first block to list (paging)")
	inv.Flags().Int64Var(&limit, "limit", 0, "most blocks to list (paging)")
	c.AddCommand(inv)
	return c
}

// showInventory prints one endpoint's inventory.
func (a *app) showInventory(service string, ep int64, q url.Values) error {
	body, err := a.get("get kv inventory", kvInventoryPath, q, errorOpts{
		notFound: fmt.Sprintf("llbd has no KV inventory for endpoint %d of service %q (is kvExactMode on, and is that the rule key?)", ep, service),
		noRoute:  "this llbd does not serve the KV inventory view (" + kvInventoryPath + ") yet: it needs llbd with the KV-exact data plane attached",
	})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var v kvInventoryView
	if err := decode("get kv inventory", body, &v); err != nil {
		return err
	}
	svc := string(v.ServiceID)
	var s string
	if json.Unmarshal(v.ServiceID, &s) == nil {
		svc = s
	}
	fmt.Fprintf(a.stdout, "service_id=%s ep_idx=%d hash_algo=%s total=%d shown=%d\n", sanitize(svc), v.EpIdx, sanitize(v.HashAlgo), v.Total, len(v.Blocks))
	t := newTable("BLOCK IDX", "HASH (UINT64)", "HASH (HEX)")
	for _, b := range v.Blocks {
		t.add(strconv.FormatInt(b.BlockIdx, 10), strconv.FormatUint(b.HashUint64, 10), fmt.Sprintf("%016x", b.HashUint64))
	}
	return t.render(a.stdout)
}
