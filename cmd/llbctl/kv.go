package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
)

// kvInventoryPath is LoxiLB's KV inventory route.
const kvInventoryPath = "/netlox/v1/config/ai/kv/inventory"

// kvInventoryView is the body of GET /config/ai/kv/inventory:
// {service_id, ep_idx, hash_algo, blocks:[{block_idx, hash_uint64}], total},
// plus llbd's extras under "llb". service_id is LoxiLB's numeric rule id and
// llb's rule key, so it is kept raw; LLB is nil from a server without the
// extras (LoxiLB).
type kvInventoryView struct {
	ServiceID json.RawMessage `json:"service_id"`
	EpIdx     int64           `json:"ep_idx"`
	HashAlgo  string          `json:"hash_algo"`
	Blocks    []struct {
		BlockIdx   int64  `json:"block_idx"`
		HashUint64 uint64 `json:"hash_uint64"`
	} `json:"blocks"`
	Total int64                    `json:"total"`
	LLB   *restapi.InventoryExtras `json:"llb"`
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
"llbctl get lb <ip> <port> <proto>" as "rule key", e.g. tcp:10.10.10.254:2020@10.10.10.254)
or the rule id; LoxiLB takes its numeric service id. --ep is the endpoint index
(IDX in "llbctl get endpoints").

Besides the blocks, llbd reports each DP rank's mirror (blocks, evictions,
resyncs, hash-contract state) and KV-event feed (connected, reconnects, last
sequence number, events/s, gaps), and the endpoint's KV capacity. A page holds
100 blocks unless --limit says otherwise (at most 10000).`,
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
	inv.Flags().StringVar(&service, "service", "", "the rule: llb's rule key or id (LoxiLB: its service id)")
	inv.Flags().Int64Var(&ep, "ep", 0, "endpoint index in the rule")
	inv.Flags().Int64Var(&offset, "offset", 0, "first block to list (paging)")
	inv.Flags().Int64Var(&limit, "limit", 0, "most blocks to list (paging; llbd's default 100, at most 10000)")
	c.AddCommand(inv)
	return c
}

// showInventory prints one endpoint's inventory.
func (a *app) showInventory(service string, ep int64, q url.Values) error {
	body, err := a.get("get kv inventory", kvInventoryPath, q, errorOpts{
		notFound: fmt.Sprintf("llbd has no KV inventory for endpoint %d of service %q (is kvExactMode on, and is that the rule key?)", ep, service),
		noRoute:  "this llbd does not serve the KV inventory view: it runs without a data plane (--no-data-plane), or is older than llbctl",
		hint404:  "check the rule key (llbctl get lb <ip> <port> <proto>) and the endpoint index (llbctl get endpoints)",
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
	if x := v.LLB; x != nil {
		capacity := "unknown (the law treats it as the mean of the known ones)"
		if x.Capacity.Known {
			capacity = strconv.FormatInt(x.Capacity.Blocks, 10) + " blocks"
		}
		fmt.Fprintf(a.stdout, "endpoint=%s role=%s rule_id=%s kv_capacity=%s\n", sanitize(x.Endpoint), sanitize(x.Role), sanitize(x.RuleID), capacity)
		if p := x.Prediction; p != nil {
			fmt.Fprintf(a.stdout, "predictions=%s (match/over/under)", restapi.FormatKVPrediction(p))
			if p.LastPredicted != nil && p.LastActual != nil {
				fmt.Fprintf(a.stdout, " last predicted=%d cached=%d", *p.LastPredicted, *p.LastActual)
			}
			fmt.Fprintln(a.stdout)
			if p.State == restapi.PredictionMismatch {
				fmt.Fprintln(a.stdout, "predictions disagree with the engine: "+sanitize(p.Detail))
			}
		}
		if err := showRanks(a, x.Ranks); err != nil {
			return err
		}
	}
	t := newTable("BLOCK IDX", "HASH (UINT64)", "HASH (HEX)")
	for _, b := range v.Blocks {
		t.add(strconv.FormatInt(b.BlockIdx, 10), strconv.FormatUint(b.HashUint64, 10), fmt.Sprintf("%016x", b.HashUint64))
	}
	if err := t.render(a.stdout); err != nil {
		return err
	}
	if v.LLB != nil && v.LLB.NextOffset != nil {
		fmt.Fprintf(a.stdout, "more: --offset %d\n", *v.LLB.NextOffset)
	}
	return nil
}

// showRanks prints the per-DP-rank mirror and feed statistics.
func showRanks(a *app, ranks []restapi.InventoryRank) error {
	t := newTable("RANK", "CONNECTED", "BLOCKS", "CPU BLOCKS", "EVICTIONS", "RESYNCS", "CONTRACT", "IGNORED", "LAST SEQ", "EVENTS/S", "GAPS", "RECONNECTS")
	var details []string
	for _, r := range ranks {
		m := r.Mirror
		contract := m.Contract.State
		if m.Contract.Reason != "" {
			contract += " (" + m.Contract.Reason + ")"
		}
		if m.Contract.Detail != "" {
			details = append(details, fmt.Sprintf("rank %d contract: %s", r.Rank, m.Contract.Detail))
		}
		row := []string{strconv.Itoa(r.Rank)}
		f := r.Feed
		if f == nil {
			row = append(row, "no feed")
		} else {
			row = append(row, yesNo(f.Connected))
		}
		ign := m.Ignored
		if f != nil {
			ign = append(append([]restapi.KVIgnored(nil), f.Ignored...), ign...)
		}
		for _, g := range ign {
			if g.Cause != "" {
				details = append(details, fmt.Sprintf("rank %d ignored %s: %s", r.Rank, g.Reason, g.Cause))
			}
		}
		row = append(row, strconv.Itoa(m.Blocks), strconv.Itoa(m.OffloadBlocks), strconv.FormatUint(m.Evictions, 10), strconv.FormatUint(m.Resyncs, 10),
			orDash(contract), restapi.FormatKVIgnored(ign))
		if f == nil {
			row = append(row, "-", "-", "-", "-")
		} else {
			seq := "-"
			if f.LastSeq != nil {
				seq = strconv.FormatUint(*f.LastSeq, 10)
			}
			row = append(row, seq, strconv.FormatFloat(f.EventsPerSec, 'f', 1, 64), strconv.FormatUint(f.Gaps, 10), strconv.FormatUint(f.Reconnects, 10))
		}
		t.add(row...)
	}
	if err := t.render(a.stdout); err != nil {
		return err
	}
	for _, d := range details {
		fmt.Fprintln(a.stdout, sanitize(d))
	}
	_, err := fmt.Fprintln(a.stdout)
	return err
}

// yesNo renders a boolean cell.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
