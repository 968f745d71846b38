package restapi

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// The external controller routes (the seed page's "layer 3"):
//
//	POST /netlox/v1/config/ai/controller/endpoint   set one endpoint's state, weight, epoch
//	GET  /netlox/v1/config/ai/controller            every rule's endpoints as the controller sees them
//
// A controller instruction is runtime state, not configuration: it is not
// persisted, and the controller re-sends it (LoxiLB's controller streams
// snapshots for the same reason).

// Controller states (ControllerUpdate.State, ControllerStatus.State), in
// lockstep with LoxiLB's loxilb.aictrl.v1 EpState, plus NONE for "no
// controller instruction".
const (
	CtrlActive   = "ACTIVE"
	CtrlDraining = "DRAINING"
	CtrlDisabled = "DISABLED"
	CtrlNone     = "NONE"
)

// ControllerRuntime is an optional Runtime interface: a Runtime that folds an
// external controller's instructions into routing serves the controller
// routes. Its Status reports each endpoint's instruction too
// (EndpointStatus.Controller), for GET /config/ai/controller and …/status.
type ControllerRuntime interface {
	// SetController applies u to endpoint ep of rule k. restapi has already
	// checked the rule, the index and every field. Errors wrap
	// ErrStaleEpoch (u.Epoch is older than the applied epoch),
	// ErrNotRunning, ErrNoEndpoint or ErrDataPlaneBusy. It must bound its
	// own wait.
	SetController(k rule.RuleKey, ep int, u ControllerUpdate) error
	// Controller returns endpoint ep's instruction in force (State
	// CtrlNone when there is none); restapi completes partial updates from
	// it. Errors as for SetController, except ErrStaleEpoch.
	Controller(k rule.RuleKey, ep int) (ControllerStatus, error)
}

// ControllerUpdate is one complete instruction for one endpoint (State is
// CtrlActive, CtrlDraining, CtrlDisabled or CtrlNone); the catalog stores
// and replicates it in a cluster.
type ControllerUpdate = catalog.ControllerUpdate

// ControllerStatus is one endpoint's controller view.
type ControllerStatus struct {
	// State is ACTIVE, DRAINING, DISABLED, or NONE when no controller
	// instruction is in force.
	State string `json:"state"`
	// Weight is the weight last set (100 under NONE).
	Weight int `json:"weight"`
	// EffectiveWeight is the weight in force now: Weight while fresh,
	// gliding to 100 once stale.
	EffectiveWeight int `json:"effective_weight"`
	// Epoch is the highest epoch applied (kept by a NONE release; 0 when the
	// endpoint never had an instruction).
	Epoch uint64 `json:"epoch"`
	// Updated is when the last update was applied; absent under NONE.
	Updated time.Time `json:"updated,omitzero"`
	// Stale is true once no update came for the staleness window.
	Stale bool `json:"stale"`
}

// ControllerView is the body of GET /config/ai/controller.
type ControllerView struct {
	// Services lists every rule in creation order ([] when none).
	Services []ControllerServiceView `json:"services"`
}

// ControllerServiceView is one rule in ControllerView.
type ControllerServiceView struct {
	// Service is the rule key; ID and Name its id and name.
	Service string `json:"service"`
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	// Detail is the data plane's note on the rule (e.g. why it is not
	// running).
	Detail string `json:"detail,omitempty"`
	// Endpoints are the rule's endpoints in index order.
	Endpoints []ControllerEndpointView `json:"endpoints"`
}

// ControllerEndpointView is one endpoint in ControllerServiceView: its
// identity and, flattened, its controller status (absent when the data plane
// did not report one; Detail then says so).
type ControllerEndpointView struct {
	// EpIdx is the endpoint index; Endpoint its ip:port; Role its P/D role.
	EpIdx    int    `json:"ep_idx"`
	Endpoint string `json:"endpoint"`
	Role     string `json:"role"`
	*ControllerStatus
	// Detail explains a missing controller status.
	Detail string `json:"detail,omitempty"`
}

// postController applies one controller instruction.
func (s *Server) postController(c echo.Context) error {
	ctl, ok := s.cfg.Runtime.(ControllerRuntime)
	if !ok { // unreachable: the route is mounted only for a ControllerRuntime
		return echo.ErrNotFound
	}
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	req, err := decodeControllerRequest(body)
	if err != nil {
		return err
	}
	rec, err := lookupService(s.cat.Rules(), req.service)
	if err != nil {
		return err
	}
	r := &rec.Rule
	if err := endpointIndex(r, req.ep); err != nil {
		return err
	}
	// Partial updates are completed from the endpoint's current
	// instruction; ctrlMu makes read-complete-apply atomic against other
	// controller writes.
	s.ctrlMu.Lock()
	defer s.ctrlMu.Unlock()
	u, err := completeUpdate(ctl, r.Key, req)
	if err != nil {
		return fmt.Errorf("rule %s endpoint %d: %w", r.Key, req.ep, err)
	}
	if s.cat.SharesControllers() {
		err = s.cat.SetController(c.Request().Context(), r, req.ep, u)
	} else {
		err = ctl.SetController(r.Key, req.ep, u)
	}
	if err != nil {
		return fmt.Errorf("rule %s endpoint %d: %w", r.Key, req.ep, err)
	}
	s.log.Info().Str(logfield.Rule, r.Key.String()).Int(logfield.EndpointIndex, req.ep).Str(logfield.State, u.State).
		Int(logfield.Weight, u.Weight).Uint64(logfield.Epoch, u.Epoch).Msg("controller update applied")
	return c.JSON(http.StatusOK, successBody)
}

// completeUpdate fills the fields req omits: state and weight from the
// endpoint's current instruction (ACTIVE and 100 when none is in force), the
// epoch from the applied one (so an operator's manual update is never stale).
func completeUpdate(ctl ControllerRuntime, k rule.RuleKey, req controllerRequest) (ControllerUpdate, error) {
	if req.state != nil && req.weight != nil && req.epoch != nil {
		return ControllerUpdate{State: *req.state, Weight: *req.weight, Epoch: *req.epoch}, nil
	}
	cur, err := ctl.Controller(k, req.ep)
	if err != nil {
		return ControllerUpdate{}, fmt.Errorf("reading the instruction in force, which an update without state, weight and epoch is completed from: %w", err)
	}
	u := ControllerUpdate{State: CtrlActive, Weight: 100, Epoch: cur.Epoch}
	if cur.State != CtrlNone {
		u.State, u.Weight = cur.State, cur.Weight
	}
	if req.state != nil {
		u.State = *req.state
	}
	if req.weight != nil {
		u.Weight = *req.weight
	}
	if req.epoch != nil {
		u.Epoch = *req.epoch
	}
	return u, nil
}

// getController lists every rule's endpoints with their controller status;
// ?service= (a rule key or id) narrows it to one rule.
func (s *Server) getController(c echo.Context) error {
	t := s.cat.Rules()
	recs := t.All()
	if ref, filter := c.QueryParam("service"), c.QueryParams().Has("service"); filter {
		rec, err := lookupService(t, ref)
		if err != nil {
			return err
		}
		recs = []*catalog.RuleRecord{rec}
	}
	out := ControllerView{Services: make([]ControllerServiceView, 0, len(recs))}
	for _, rec := range recs {
		out.Services = append(out.Services, s.controllerService(&rec.Rule))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) controllerService(r *rule.Rule) ControllerServiceView {
	st, ok := s.cfg.Runtime.Status(r.Key)
	v := ControllerServiceView{Service: r.Key.String(), ID: r.ID(), Name: r.Name(), Detail: st.Detail}
	if !ok {
		v.Detail = "the data plane does not know this rule"
	}
	eps := endpointStates(r, st)
	v.Endpoints = make([]ControllerEndpointView, len(eps))
	for i, e := range eps {
		ev := ControllerEndpointView{
			EpIdx:            i,
			Endpoint:         r.Effective.Endpoints[i].Addr.String(),
			Role:             r.Effective.Endpoints[i].Role.String(),
			ControllerStatus: e.Controller,
		}
		if e.Controller == nil {
			ev.Detail = "no controller state from the data plane"
			if e.Detail != "" {
				ev.Detail += ": " + e.Detail
			}
		}
		v.Endpoints[i] = ev
	}
	return v
}
