package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/spf13/cobra"
)

// controllerPath is the external controller's per-endpoint route.
const controllerPath = "/netlox/v1/config/ai/controller/endpoint"

// Controller endpoint states.
var controllerStates = []string{"ACTIVE", "DRAINING", "DISABLED"}

// controllerUpdate is the body of POST /config/ai/controller/endpoint:
// {"service":"<rule key>","ep_idx":N,"state":"ACTIVE|DRAINING|DISABLED",
// "weight":0-100,"epoch":N}. Fields not given on the command line are left
// out.
type controllerUpdate struct {
	// Service is the rule key.
	Service string `json:"service"`
	// EpIdx is the endpoint index in the rule.
	EpIdx int64 `json:"ep_idx"`
	// State is ACTIVE, DRAINING or DISABLED.
	State string `json:"state,omitempty"`
	// Weight is 0–100; 100 is neutral.
	Weight *int64 `json:"weight,omitempty"`
	// Epoch orders updates from the controller.
	Epoch *int64 `json:"epoch,omitempty"`
}

func (a *app) setCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "set",
		Short: "Change runtime settings",
		Args:  usageArgs(cobra.NoArgs, "llbctl set controller ..."),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	var u controllerUpdate
	var weight, epoch int64
	var dryRun bool
	ctl := &cobra.Command{
		Use:   "controller --service <rule key> --ep <idx> [--state ACTIVE|DRAINING|DISABLED] [--weight 0-100] [--epoch N]",
		Short: "Set an endpoint's controller state and weight (POST " + controllerPath + ")",
		Long: `Set one endpoint's external-controller state and weight, as the optional
external controller of the routing hierarchy does: DISABLED excludes the
endpoint from every tier, DRAINING serves only work already pinned to it, and
the weight (0–100, 100 neutral) scales its capacity in the Tier-1.5 load law.

--service is the rule key shown by "llbctl get lb <ip> <port> <proto>".`,
		Example: `  llbctl set controller --service tcp:10.10.10.254:2020@10.10.10.254 --ep 1 --state DRAINING
  llbctl set controller --service tcp:10.10.10.254:2020@10.10.10.254 --ep 0 --weight 50 --epoch 7`,
		Args: usageArgs(cobra.NoArgs, "llbctl set controller --service <rule key> --ep <idx> ..."),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			var problems []string
			if strings.TrimSpace(u.Service) == "" {
				problems = append(problems, "--service is required")
			}
			if !f.Changed("ep") {
				problems = append(problems, "--ep is required")
			} else if u.EpIdx < 0 || u.EpIdx > 31 {
				problems = append(problems, fmt.Sprintf("--ep %d: endpoint indexes are 0–31", u.EpIdx))
			}
			if !f.Changed("state") && !f.Changed("weight") {
				problems = append(problems, "give --state, --weight or both")
			}
			if f.Changed("state") {
				s := strings.ToUpper(strings.TrimSpace(u.State))
				ok := false
				for _, v := range controllerStates {
					ok = ok || s == v
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("--state %q: want %s", u.State, strings.Join(controllerStates, ", ")))
				}
				u.State = s
			}
			if f.Changed("weight") {
				if weight < 0 || weight > 100 {
					problems = append(problems, fmt.Sprintf("--weight %d: want 0–100 (100 is neutral)", weight))
				}
				u.Weight = ptr(weight)
			}
			if f.Changed("epoch") {
				if epoch < 0 {
					problems = append(problems, "--epoch must not be negative")
				}
				u.Epoch = ptr(epoch)
			}
			if len(problems) > 0 {
				return usagef("set controller: %s", strings.Join(problems, "; "))
			}
			body, err := json.Marshal(u)
			if err != nil {
				return fmt.Errorf("encoding the update: %w", err)
			}
			if dryRun {
				return writeJSON(a.stdout, body)
			}
			return a.postController(body)
		},
	}
	ctl.Flags().StringVar(&u.Service, "service", "", "the rule key, e.g. tcp:10.10.10.254:2020@10.10.10.254")
	ctl.Flags().Int64Var(&u.EpIdx, "ep", 0, "endpoint index in the rule")
	ctl.Flags().StringVar(&u.State, "state", "", "ACTIVE, DRAINING or DISABLED")
	ctl.Flags().Int64Var(&weight, "weight", 0, "capacity weight 0–100 (100 is neutral)")
	ctl.Flags().Int64Var(&epoch, "epoch", 0, "controller epoch of this update")
	ctl.Flags().BoolVar(&dryRun, "dry-run", false, "print the JSON that would be posted and exit")
	c.AddCommand(ctl)
	return c
}

// postController sends a controller update and prints the answer.
func (a *app) postController(body []byte) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	res, err := c.do(a.ctx, http.MethodPost, controllerPath, nil, body)
	if err != nil {
		return err
	}
	if err := check("set controller", res, errorOpts{
		noRoute: "this llbd does not serve the controller route (" + controllerPath + ") yet",
	}); err != nil {
		return err
	}
	return a.printResult(res.body)
}
