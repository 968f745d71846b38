package restapi

import (
	"net/http"

	"github.com/VictoriaMetrics/metrics"
	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/catalog"
)

// VersionView is GET /netlox/v1/version.
type VersionView struct {
	// Version is llbd's version.
	Version string `json:"version"`
	// DataPlane names the attached data plane ("none" without one).
	DataPlane string `json:"dataPlane"`
	// WritesAccepted is false until the boot restore has finished.
	WritesAccepted bool `json:"writesAccepted"`
	// State is the boot restore's report; absent until it has run.
	State *catalog.RestoreReport `json:"state,omitempty"`
}

func (s *Server) getVersion(c echo.Context) error {
	v := VersionView{Version: s.cfg.Version, DataPlane: "unnamed", WritesAccepted: s.WritesAccepted(), State: s.cat.Report()}
	if n, ok := s.cfg.Runtime.(DataPlaneNamer); ok {
		v.DataPlane = n.DataPlaneName()
	}
	return c.JSON(http.StatusOK, v)
}

// getMetrics writes the metrics set in Prometheus text format.
func (s *Server) getMetrics(c echo.Context) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, "text/plain; version=0.0.4; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	s.cfg.Metrics.WritePrometheus(w)
	if s.cfg.ProcessMetrics {
		metrics.WriteProcessMetrics(w)
	}
	return nil
}
