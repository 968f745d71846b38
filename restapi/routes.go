package restapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/internal/logfield"
)

// Route templates.
const (
	basePath = "/netlox/v1"
	lbPath   = basePath + "/config/loadbalancer"
	keyPath  = "/externalipaddress/:ip/port/:port/protocol/:proto"
	rangeKey = "/externalipaddress/:ip/port/:port/portmax/:portmax/protocol/:proto"
	aiPath   = basePath + "/config/ai"
	// kvInventoryPath is LoxiLB's KV inventory view.
	kvInventoryPath = aiPath + "/kv/inventory"
	// controllerPath is the external controller's view; POSTs go to
	// controllerPath + "/endpoint".
	controllerPath = aiPath + "/controller"
)

// route is one registered route.
type route struct {
	method, path string
	handler      echo.HandlerFunc
}

// routeTable lists every route. Capabilities a Runtime offers through
// optional interfaces add their routes here, behind a type assertion on
// s.cfg.Runtime, so the REST layer grows without knowing the data plane.
func (s *Server) routeTable() []route {
	rs := []route{
		{http.MethodPost, lbPath, s.postRule},
		{http.MethodGet, lbPath + "/all", s.getAll},
		{http.MethodDelete, lbPath + "/all", s.deleteAll},
		{http.MethodDelete, lbPath + "/name/:name", s.deleteByName},
		{http.MethodGet, lbPath + "/id/:id", s.getByID},
		{http.MethodGet, lbPath + keyPath, s.getByKey},
		{http.MethodGet, lbPath + keyPath + "/status", s.getStatus},
		{http.MethodGet, lbPath + keyPath + "/stats", s.getStats},
		{http.MethodDelete, lbPath + keyPath, s.deleteByKey},
		{http.MethodDelete, lbPath + rangeKey, s.deleteByKey},
		{http.MethodDelete, lbPath + "/hosturl/:hosturl" + keyPath, s.deleteByKey},
		{http.MethodDelete, lbPath + "/hosturl/:hosturl" + rangeKey, s.deleteByKey},
		{http.MethodGet, basePath + "/version", s.getVersion},
		{http.MethodGet, basePath + "/metrics", s.getMetrics},
		{http.MethodGet, "/metrics", s.getMetrics},
		{http.MethodGet, clusterPath, s.getCluster},
		{http.MethodPost, apikeyPath, s.postAPIKey},
		{http.MethodGet, apikeyPath, s.getAPIKeys},
		{http.MethodGet, apikeyPath + "/:key_id", s.getAPIKey},
		{http.MethodPatch, apikeyPath + "/:key_id", s.patchAPIKey},
		{http.MethodDelete, apikeyPath + "/:key_id", s.deleteAPIKey},
		{http.MethodPost, ratelimitPath, s.postRateLimit},
		{http.MethodGet, ratelimitPath, s.getRateLimits},
		{http.MethodGet, ratelimitPath + "/:tenant_id", s.getRateLimit},
	}
	if _, ok := s.cfg.Runtime.(InventoryViewer); ok {
		rs = append(rs, route{http.MethodGet, kvInventoryPath, s.getInventory})
	}
	if _, ok := s.cfg.Runtime.(ControllerRuntime); ok {
		rs = append(rs,
			route{http.MethodPost, controllerPath + "/endpoint", s.postController},
			route{http.MethodGet, controllerPath, s.getController})
	}
	return rs
}

func (s *Server) buildEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	e.HTTPErrorHandler = s.handleError
	e.Use(s.observe)
	if s.auth != nil {
		e.Use(s.authenticate)
	}
	e.Use(s.maintenanceGate)
	s.routes = make(map[string]bool)
	for _, r := range s.routeTable() {
		e.Add(r.method, r.path, r.handler)
		s.routes[r.path] = true
	}
	return e
}

// observe is the outermost middleware: it turns a handler panic into a 500,
// renders errors, and records the request's metrics and debug log line.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		s.log.Debug().Str(logfield.Method, c.Request().Method).Str(logfield.Path, c.Request().URL.Path).
			Str(logfield.Remote, c.RealIP()).Msg("request received")
		err := func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					s.log.Error().Str(logfield.Method, c.Request().Method).Str(logfield.Path, c.Request().URL.Path).
						Bytes("stack", debug.Stack()).Msgf("handler panic: %v", p)
					err = fmt.Errorf("restapi: handler panic: %v", p)
				}
			}()
			return next(c)
		}()
		if err != nil {
			s.handleError(err, c)
		}
		route := c.Path()
		if !s.routes[route] {
			route = "unmatched"
		}
		status := c.Response().Status
		d := time.Since(start)
		s.metrics.request(c.Request().Method, route, status, d)
		s.log.Debug().Str(logfield.Method, c.Request().Method).Str(logfield.Path, c.Request().URL.Path).
			Str(logfield.Route, route).Int(logfield.Status, status).Dur(logfield.Duration, d).
			Str(logfield.Remote, c.RealIP()).Msg("request answered")
		return nil
	}
}

// authenticate requires the configured bearer token on every route.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := s.auth.check(c.Request().Header.Get(echo.HeaderAuthorization)); err != nil {
			s.metrics.authFailures.Inc()
			return err
		}
		return next(c)
	}
}

// maintenanceGate refuses writes until Restore has finished.
func (s *Server) maintenanceGate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		switch c.Request().Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if !s.cat.Restored() {
				return ErrMaintenance
			}
		}
		return next(c)
	}
}

// handleError writes err as LoxiLB's error body.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var status int
	var body ErrorBody
	var he *echo.HTTPError
	if errors.As(err, &he) {
		status = he.Code
		switch he.Code {
		case http.StatusNotFound:
			body = ErrorBody{Code: status, Message: msgNotFound, Result: fmt.Sprintf("no route %s %s", c.Request().Method, c.Request().URL.Path)}
		case http.StatusMethodNotAllowed:
			body = ErrorBody{Code: status, Message: msgNotAllowed, Result: fmt.Sprintf("method %s is not allowed on %s", c.Request().Method, c.Request().URL.Path)}
		default:
			body = ErrorBody{Code: status, Message: http.StatusText(status), Result: fmt.Sprint(he.Message)}
		}
	} else {
		status, body = errorResponse(err)
	}
	switch status {
	case http.StatusUnauthorized:
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="llb"`)
	case http.StatusServiceUnavailable:
		c.Response().Header().Set(echo.HeaderRetryAfter, strconv.Itoa(RetryAfterSeconds))
	case http.StatusInternalServerError:
		s.log.Error().Err(err).Str(logfield.Method, c.Request().Method).Str(logfield.Path, c.Request().URL.Path).Msg("request failed")
	}
	if err := c.JSON(status, body); err != nil {
		s.log.Debug().Err(err).Msg("writing error response")
	}
}
