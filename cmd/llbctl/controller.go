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

// The external controller's routes: POST an update to controllerPath, GET
// every rule's controller view from controllerViewPath.
const (
	controllerPath     = "/netlox/v1/config/ai/controller/endpoint"
	controllerViewPath = "/netlox/v1/config/ai/controller"
)

// controllerStates lists the states set controller accepts.
func controllerStates() []string {
	return []string{restapi.CtrlActive, restapi.CtrlDraining, restapi.CtrlDisabled, restapi.CtrlNone}
}

// noControllerRoute is the hint when llbd does not serve the controller routes.
const noControllerRoute = "this llbd does not serve the controller routes: it runs without a data plane (--no-data-plane), or is older than llbctl"

// controllerUpdate is the body of POST /config/ai/controller/endpoint:
// {"service":"<rule key or id>","ep_idx":N,"state":"ACTIVE|DRAINING|DISABLED|NONE",
// "weight":0-100,"epoch":N}. Fields not given on the command line are left
// out; llbd completes them from the endpoint's current instruction.
type controllerUpdate struct {
	// Service is the rule key or id.
	Service string `json:"service"`
	// EpIdx is the endpoint index in the rule.
	EpIdx int64 `json:"ep_idx"`
	// State is ACTIVE, DRAINING, DISABLED or NONE.
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
		Args:  usageArgs(cobra.NoArgs, "llbctl set controller|apikey|ratelimit ..."),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	var u controllerUpdate
	var weight, epoch int64
	var dryRun bool
	ctl := &cobra.Command{
		Use:   "controller --service <rule key or id> --ep <idx> [--state ACTIVE|DRAINING|DISABLED|NONE] [--weight 0-100] [--epoch N]",
		Short: "Set an endpoint's controller state and weight (POST " + controllerPath + ")",
		Long: `Set one endpoint's external-controller state and weight, as the optional
external controller of the routing hierarchy does: DISABLED excludes the
endpoint from every tier, DRAINING serves only work already pinned to it, and
the weight (0–100, 100 neutral) scales its capacity in the Tier-1.5 load law.
NONE releases the endpoint from the controller.

A flag not given keeps the endpoint's current value (a weight on an endpoint
without an instruction means ACTIVE; the epoch defaults to the applied one, so
a manual update is never stale). An update with an epoch older than the
applied one is refused (409). Instructions are not persisted and a rule
replace resets them: the controller re-sends.

--service is the rule key shown by "llbctl get lb <ip> <port> <proto>", or the
rule id.`,
		Example: `  llbctl set controller --service tcp:10.10.10.254:2020@10.10.10.254 --ep 1 --state DRAINING
  llbctl set controller --service tcp:10.10.10.254:2020@10.10.10.254 --ep 0 --weight 50 --epoch 7
  llbctl set controller --service tcp:10.10.10.254:2020@10.10.10.254 --ep 1 --state NONE`,
		Args: usageArgs(cobra.NoArgs, "llbctl set controller --service <rule key or id> --ep <idx> ..."),
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
				for _, v := range controllerStates() {
					ok = ok || s == v
				}
				if !ok {
					problems = append(problems, fmt.Sprintf("--state %q: want %s", u.State, strings.Join(controllerStates(), ", ")))
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
	ctl.Flags().StringVar(&u.Service, "service", "", "the rule key (e.g. tcp:10.10.10.254:2020@10.10.10.254) or id")
	ctl.Flags().Int64Var(&u.EpIdx, "ep", 0, "endpoint index in the rule")
	ctl.Flags().StringVar(&u.State, "state", "", "ACTIVE, DRAINING, DISABLED or NONE")
	ctl.Flags().Int64Var(&weight, "weight", 0, "capacity weight 0–100 (100 is neutral)")
	ctl.Flags().Int64Var(&epoch, "epoch", 0, "controller epoch of this update")
	ctl.Flags().BoolVar(&dryRun, "dry-run", false, "print the JSON that would be posted and exit")
	c.AddCommand(ctl, a.setAPIKeyCmd(), a.setRateLimitCmd())
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
		noRoute: noControllerRoute,
		hint404: "check the rule key (llbctl get lb <ip> <port> <proto>) and the endpoint index (llbctl get endpoints)",
	}); err != nil {
		return err
	}
	return a.printResult(res.body)
}

func (a *app) getControllerCmd() *cobra.Command {
	var service string
	c := &cobra.Command{
		Use:     "controller [--service <rule key or id>]",
		Aliases: []string{"ctrl"},
		Short:   "Show every rule's endpoints as the external controller set them (GET " + controllerViewPath + ")",
		Long: `Show, per rule and endpoint, the external controller's instruction: state
(ACTIVE, DRAINING, DISABLED; NONE without one), the weight set, the weight in
force (gliding back to 100 once updates stop), the epoch, when it was last
updated and whether it is stale.`,
		Example: `  llbctl get controller
  llbctl get controller --service tcp:10.10.10.254:2020@10.10.10.254 -o json`,
		Args: usageArgs(cobra.NoArgs, "llbctl get controller [--service <rule key or id>]"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var q url.Values
			if cmd.Flags().Changed("service") {
				if strings.TrimSpace(service) == "" {
					return usagef("--service is empty: give a rule key or id, or drop the flag to list every rule")
				}
				q = url.Values{"service": {service}}
			}
			return a.showController(q)
		},
	}
	c.Flags().StringVar(&service, "service", "", "show only this rule (its key or id)")
	return c
}

// showController prints GET /config/ai/controller.
func (a *app) showController(q url.Values) error {
	body, err := a.get("get controller", controllerViewPath, q, errorOpts{noRoute: noControllerRoute})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var v restapi.ControllerView
	if err := decode("get controller", body, &v); err != nil {
		return err
	}
	t := newTable("SERVICE", "IDX", "ENDPOINT", "ROLE", "STATE", "WEIGHT", "EFFECTIVE", "EPOCH", "UPDATED", "STALE", "DETAIL")
	for _, s := range v.Services {
		svc := s.Service
		if len(s.Endpoints) == 0 {
			t.add(svc, "-", "-", "-", "-", "-", "-", "-", "-", "-", orDash(s.Detail))
		}
		for _, ep := range s.Endpoints {
			row := []string{svc, strconv.Itoa(ep.EpIdx), ep.Endpoint, ep.Role}
			svc = ""
			c := ep.ControllerStatus
			if c == nil {
				t.add(append(row, "-", "-", "-", "-", "-", "-", orDash(ep.Detail))...)
				continue
			}
			updated, stale := "-", "no"
			if !c.Updated.IsZero() {
				updated = c.Updated.UTC().Format(time.RFC3339)
			}
			if c.Stale {
				stale = "yes"
			}
			t.add(append(row, c.State, strconv.Itoa(c.Weight), strconv.Itoa(c.EffectiveWeight),
				strconv.FormatUint(c.Epoch, 10), updated, stale, orDash(ep.Detail))...)
		}
	}
	return t.render(a.stdout)
}
