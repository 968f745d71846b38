package restapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// AllView is GET /config/loadbalancer/all: {"lbAttr":[...]}.
type AllView struct {
	// LbAttr lists the rules in creation order; [] when there are none.
	LbAttr []rule.LoadbalanceEntry `json:"lbAttr"`
}

var successBody = ResultBody{Result: "Success"}

// postRule creates, replaces, attaches to or detaches from a rule.
func (s *Server) postRule(c echo.Context) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	entry, err := DecodeEntry(body)
	if err != nil {
		return err
	}
	if err := rule.Validate(entry); err != nil {
		return err
	}
	oper := entry.ServiceArguments.Oper
	req, err := rule.NormalizeEntry(entry)
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	_, err = s.write(c.Request().Context(), func(t *catalog.Rules) (*catalog.Rules, []catalog.Change, error) {
		next, ch, err := t.Upsert(req, oper, now, s.cfg.NewID)
		if err != nil {
			return nil, nil, err
		}
		return next, []catalog.Change{ch}, nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, successBody)
}

// getAll lists every rule with per-endpoint state; ?projectId= filters.
func (s *Server) getAll(c echo.Context) error {
	t := s.cat.Rules()
	project, filter := c.QueryParam("projectId"), c.QueryParams().Has("projectId")
	out := AllView{LbAttr: make([]rule.LoadbalanceEntry, 0, t.Len())}
	for _, r := range t.All() {
		if filter && r.Rule.Entry.ServiceArguments.ProjectID != project {
			continue
		}
		out.LbAttr = append(out.LbAttr, s.view(&r.Rule))
	}
	return c.JSON(http.StatusOK, out)
}

func (s *Server) view(r *rule.Rule) rule.LoadbalanceEntry {
	st, _ := s.cfg.Runtime.Status(r.Key)
	return entryView(r, st)
}

// getByKey returns the first rule on VIP:port/proto, or 404 with an empty
// body (LoxiLB's shape for a GET miss).
func (s *Server) getByKey(c echo.Context) error {
	rec, err := s.lookupPath(c)
	if err != nil || rec == nil {
		return notFoundOr(c, err)
	}
	return c.JSON(http.StatusOK, s.view(&rec.Rule))
}

// getByID returns the rule with the opaque id, or 404 with an empty body.
func (s *Server) getByID(c echo.Context) error {
	id, err := pathParam(c, "id")
	if err != nil {
		return err
	}
	rec, ok := s.cat.Rules().ByID(id)
	if !ok {
		return c.NoContent(http.StatusNotFound)
	}
	return c.JSON(http.StatusOK, s.view(&rec.Rule))
}

// getStatus returns the rule's operating status.
func (s *Server) getStatus(c echo.Context) error {
	rec, err := s.lookupPath(c)
	if err != nil || rec == nil {
		return notFoundOr(c, err)
	}
	st, _ := s.cfg.Runtime.Status(rec.Rule.Key)
	return c.JSON(http.StatusOK, statusView(&rec.Rule, rec.Updated, st, s.cat.ApplyErr(rec.Rule.Key)))
}

// getStats returns the rule's traffic counters.
func (s *Server) getStats(c echo.Context) error {
	rec, err := s.lookupPath(c)
	if err != nil || rec == nil {
		return notFoundOr(c, err)
	}
	st, _ := s.cfg.Runtime.Status(rec.Rule.Key)
	return c.JSON(http.StatusOK, StatsView{
		ActiveConnections: st.Stats.ActiveConnections,
		BytesIn:           st.Stats.BytesIn,
		BytesOut:          st.Stats.BytesOut,
		TotalConnections:  st.Stats.TotalConnections,
	})
}

func notFoundOr(c echo.Context, err error) error {
	if err != nil {
		return err
	}
	return c.NoContent(http.StatusNotFound)
}

// deleteByKey deletes by VIP/port[/portmax]/proto[, hosturl][?block=]
// [&path_prefix=&path_match_mode=&model_name=].
// Without /hosturl/ the host is "", and hosturl "any" also means "".
func (s *Server) deleteByKey(c echo.Context) error {
	k, err := pathKey(c)
	if err != nil {
		return err
	}
	_, err = s.write(c.Request().Context(), func(t *catalog.Rules) (*catalog.Rules, []catalog.Change, error) {
		next, ch, err := t.Remove(k)
		if err != nil {
			return nil, nil, err
		}
		return next, []catalog.Change{ch}, nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, successBody)
}

// deleteByName deletes every rule with the name; Success even if none matches.
func (s *Server) deleteByName(c echo.Context) error {
	name, err := pathParam(c, "name")
	if err != nil {
		return err
	}
	return s.deleteWhere(c, func(r *rule.Rule) bool { return r.Name() == name })
}

// deleteAll deletes every rule.
func (s *Server) deleteAll(c echo.Context) error {
	return s.deleteWhere(c, func(*rule.Rule) bool { return true })
}

func (s *Server) deleteWhere(c echo.Context, match func(*rule.Rule) bool) error {
	_, err := s.write(c.Request().Context(), func(t *catalog.Rules) (*catalog.Rules, []catalog.Change, error) {
		next, changes := t.RemoveWhere(match)
		return next, changes, nil
	})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, successBody)
}

// lookupPath finds the rule a GET-by-key path names; nil if none.
func (s *Server) lookupPath(c echo.Context) (*catalog.RuleRecord, error) {
	vip, err := pathIP(c)
	if err != nil {
		return nil, err
	}
	port, err := pathPort(c, "port")
	if err != nil {
		return nil, err
	}
	proto, err := pathProto(c)
	if err != nil {
		return nil, err
	}
	rec, _ := s.cat.Rules().Lookup(vip, port, proto)
	return rec, nil
}

// pathKey builds the rule key of a DELETE path.
func pathKey(c echo.Context) (rule.RuleKey, error) {
	var k rule.RuleKey
	var err error
	if k.VIP, err = pathIP(c); err != nil {
		return k, err
	}
	if k.Port, err = pathPort(c, "port"); err != nil {
		return k, err
	}
	if hasParam(c, "portmax") {
		if k.PortMax, err = pathPort(c, "portmax"); err != nil {
			return k, err
		}
	}
	if k.Protocol, err = pathProto(c); err != nil {
		return k, err
	}
	if hasParam(c, "hosturl") {
		if k.Host, err = pathParam(c, "hosturl"); err != nil {
			return k, err
		}
		if k.Host == "any" {
			k.Host = ""
		}
	}
	if b := c.QueryParam("block"); b != "" {
		n, err := strconv.ParseUint(b, 10, 32)
		if err != nil {
			return k, fmt.Errorf("%w: query parameter block=%q is not an integer in 0..4294967295", ErrMalformedRequest, b)
		}
		k.Block = uint32(n)
	}
	// The inference gateway's L7 key: ?path_prefix=&path_match_mode=&model_name=.
	k.PathPrefix, k.ModelName = c.QueryParam("path_prefix"), c.QueryParam("model_name")
	switch m := c.QueryParam("path_match_mode"); m {
	case "", "disabled":
	case "prefix", "exact":
		k.PathMatchMode = m
	default:
		return k, fmt.Errorf("%w: query parameter path_match_mode=%q is not disabled, prefix or exact", ErrMalformedRequest, m)
	}
	return k, nil
}

func hasParam(c echo.Context, name string) bool {
	for _, n := range c.ParamNames() {
		if n == name {
			return true
		}
	}
	return false
}

// pathParam returns a path parameter, percent-decoded exactly once (echo
// leaves parameters escaped when the request path needed escaping).
func pathParam(c echo.Context, name string) (string, error) {
	v := c.Param(name)
	if c.Request().URL.RawPath == "" {
		return v, nil
	}
	u, err := url.PathUnescape(v)
	if err != nil {
		return "", fmt.Errorf("%w: path parameter %s=%q is not validly escaped", ErrMalformedRequest, name, v)
	}
	return u, nil
}

// pathIP parses {ip}, accepting a bracketed IPv6 literal ("[2001:db8::1]").
func pathIP(c echo.Context) (netip.Addr, error) {
	raw, err := pathParam(c, "ip")
	if err != nil {
		return netip.Addr{}, err
	}
	a, err := rule.ParseIP(strings.TrimSuffix(strings.TrimPrefix(raw, "["), "]"))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%w: externalipaddress: %v", ErrMalformedRequest, err)
	}
	return a, nil
}

func pathPort(c echo.Context, name string) (uint16, error) {
	raw, err := pathParam(c, name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(raw, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q is not an integer in 0..65535", ErrMalformedRequest, name, raw)
	}
	return uint16(n), nil
}

func pathProto(c echo.Context) (string, error) {
	p, err := pathParam(c, "proto")
	if err != nil {
		return "", err
	}
	switch p {
	case rule.ProtoTCP, rule.ProtoUDP, rule.ProtoSCTP, rule.ProtoICMP:
		return p, nil
	}
	return "", fmt.Errorf("%w: protocol %q is not one of tcp, udp, sctp, icmp", ErrMalformedRequest, p)
}
