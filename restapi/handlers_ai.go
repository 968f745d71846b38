package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/tenant"
)

// LoxiLB's AI-gateway key and tenant-limit routes (its swagger.yml and
// swagger-extras.yml; docs/tenants.md), with its status codes:
//
//	POST   /netlox/v1/config/ai/apikey                     201 {key_id, raw_key}; 400
//	GET    /netlox/v1/config/ai/apikey[?tenant_id=]        200 [ApiKeySummary]
//	GET    /netlox/v1/config/ai/apikey/{key_id}            200 ApiKeySummary; 404
//	PATCH  /netlox/v1/config/ai/apikey/{key_id}            204; 400; 404
//	DELETE /netlox/v1/config/ai/apikey/{key_id}            204; 404
//	POST   /netlox/v1/config/ai/tenant/ratelimit           204; 400
//	GET    /netlox/v1/config/ai/tenant/ratelimit/{tenant}  200 TenantRateLimitEntry; 404
//	GET    /netlox/v1/config/ai/tenant/ratelimit           200 [TenantRateLimitEntry] (llb)
//
// The raw key is in the create answer only; no answer carries key_hash.
// Unknown body fields are ignored, as LoxiLB's generated server does.

// Route templates of the key API.
const (
	apikeyPath    = aiPath + "/apikey"
	ratelimitPath = aiPath + "/tenant/ratelimit"
)

// APIKeyCreateRequest is LoxiLB's ApiKeyCreateRequest, plus llb's class.
type APIKeyCreateRequest struct {
	TenantID      *string   `json:"tenant_id"`
	Name          string    `json:"name"`
	AllowedModels []string  `json:"allowed_models"`
	RateLimitRPS  int64     `json:"rate_limit_rps"`
	BurstSize     int64     `json:"burst_size"`
	TokensPerMin  int64     `json:"tokens_per_min"`
	ExpiresAt     *jsonTime `json:"expires_at"`
	Enabled       *bool     `json:"enabled"`
	// Class is llb's: the priority class of the key's requests
	// (critical, standard, sheddable) and the highest a request may ask
	// for; "" is standard.
	Class string `json:"class"`
}

// APIKeyCreateResponse is LoxiLB's: the raw key, shown this once.
type APIKeyCreateResponse struct {
	RawKey string `json:"raw_key"`
	KeyID  string `json:"key_id"`
}

// APIKeySummary is LoxiLB's ApiKeySummary (enabled always present), plus
// llb's class. It never carries the key or its hash.
type APIKeySummary struct {
	KeyID         string     `json:"key_id"`
	TenantID      string     `json:"tenant_id"`
	Name          string     `json:"name"`
	AllowedModels []string   `json:"allowed_models"`
	RateLimitRPS  int64      `json:"rate_limit_rps"`
	BurstSize     int64      `json:"burst_size"`
	TokensPerMin  int64      `json:"tokens_per_min"`
	CreatedAt     time.Time  `json:"created_at"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
	Enabled       bool       `json:"enabled"`
	Class         string     `json:"class,omitempty"`
}

// APIKeyPatch is the PATCH body: LoxiLB's allowed_models and enabled, and
// llb's rate, burst, token and class fields. Absent fields are kept.
type APIKeyPatch struct {
	AllowedModels *[]string `json:"allowed_models"`
	Enabled       *bool     `json:"enabled"`
	RateLimitRPS  *int64    `json:"rate_limit_rps"`
	BurstSize     *int64    `json:"burst_size"`
	TokensPerMin  *int64    `json:"tokens_per_min"`
	Class         *string   `json:"class"`
}

// TenantRateLimit is LoxiLB's TenantRateLimitMod (POST) and
// TenantRateLimitEntry (GET, with updated_at).
type TenantRateLimit struct {
	TenantID     *string    `json:"tenant_id"`
	RPS          int64      `json:"rps"`
	TokensPerMin int64      `json:"tokens_per_min"`
	UpdatedAt    *time.Time `json:"updated_at,omitempty"`
}

// jsonTime is an RFC 3339 date-time ("" and null are no time).
type jsonTime struct{ t *time.Time }

func (j *jsonTime) UnmarshalJSON(b []byte) error {
	var s *string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("expires_at: want an RFC 3339 date-time string")
	}
	if s == nil || *s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, *s)
	if err != nil {
		return fmt.Errorf("expires_at %q: want an RFC 3339 date-time", *s)
	}
	j.t = &t
	return nil
}

func summaryOf(k *tenant.Key) APIKeySummary {
	models := k.AllowedModels
	if models == nil {
		models = []string{}
	}
	return APIKeySummary{KeyID: k.ID, TenantID: k.TenantID, Name: k.Name, AllowedModels: models,
		RateLimitRPS: k.RateLimitRPS, BurstSize: k.BurstSize, TokensPerMin: k.TokensPerMin,
		CreatedAt: k.CreatedAt, ExpiresAt: k.ExpiresAt, Enabled: k.Enabled, Class: k.Class}
}

// decodeAI decodes a JSON object body into v, ignoring unknown fields.
func (s *Server) decodeAI(c echo.Context, v any) error {
	body, err := s.readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return fmt.Errorf("%w: the body is empty; want a JSON object", ErrMalformedRequest)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%w: invalid json format: %v", ErrMalformedRequest, err)
	}
	return nil
}

// postAPIKey creates a key and answers its raw form, once.
func (s *Server) postAPIKey(c echo.Context) error {
	var req APIKeyCreateRequest
	if err := s.decodeAI(c, &req); err != nil {
		return err
	}
	if req.TenantID == nil {
		return fmt.Errorf("%w: tenant_id is required", tenant.ErrInvalid)
	}
	nk := tenant.NewKey{TenantID: *req.TenantID, Name: req.Name, AllowedModels: req.AllowedModels,
		RateLimitRPS: req.RateLimitRPS, BurstSize: req.BurstSize, TokensPerMin: req.TokensPerMin,
		Enabled: req.Enabled, Class: req.Class}
	if req.ExpiresAt != nil {
		nk.ExpiresAt = req.ExpiresAt.t
	}
	var out APIKeyCreateResponse
	err := s.cat.WriteKeys(c.Request().Context(), func(t *tenant.Table) (*tenant.Table, []string, error) {
		raw, id, err := tenant.NewRawKey(nil)
		if err != nil {
			return nil, nil, err
		}
		next, k, err := t.Create(nk, raw, id, s.cfg.Now())
		if err != nil {
			return nil, nil, err
		}
		out = APIKeyCreateResponse{RawKey: raw, KeyID: k.ID}
		return next, []string{catalog.KeyRecord(k.ID)}, nil
	})
	if err != nil {
		return err
	}
	// The raw key is never logged.
	s.log.Info().Str(logfield.Key, out.KeyID).Str("tenant", nk.TenantID).Msg("API key created")
	return c.JSON(http.StatusCreated, out)
}

// getAPIKeys lists the keys, of one tenant with ?tenant_id=.
func (s *Server) getAPIKeys(c echo.Context) error {
	keys := s.cat.Keys().Keys(c.QueryParam("tenant_id"))
	out := make([]APIKeySummary, len(keys))
	for i, k := range keys {
		out[i] = summaryOf(k)
	}
	return c.JSON(http.StatusOK, out)
}

// getAPIKey answers one key's summary.
func (s *Server) getAPIKey(c echo.Context) error {
	k := s.cat.Keys().Key(c.Param("key_id"))
	if k == nil {
		return fmt.Errorf("%w: API key %s not found", tenant.ErrNotFound, c.Param("key_id"))
	}
	return c.JSON(http.StatusOK, summaryOf(k))
}

// patchAPIKey changes a key's fields.
func (s *Server) patchAPIKey(c echo.Context) error {
	id := c.Param("key_id")
	if s.cat.Keys().Key(id) == nil {
		return fmt.Errorf("%w: API key %s not found", tenant.ErrNotFound, id)
	}
	var p APIKeyPatch
	if err := s.decodeAI(c, &p); err != nil {
		return err
	}
	err := s.cat.WriteKeys(c.Request().Context(), func(t *tenant.Table) (*tenant.Table, []string, error) {
		next, _, err := t.Patch(id, tenant.Patch{AllowedModels: p.AllowedModels, Enabled: p.Enabled,
			RateLimitRPS: p.RateLimitRPS, BurstSize: p.BurstSize, TokensPerMin: p.TokensPerMin, Class: p.Class})
		if err != nil {
			return nil, nil, err
		}
		return next, []string{catalog.KeyRecord(id)}, nil
	})
	if err != nil {
		return err
	}
	s.log.Info().Str(logfield.Key, id).Msg("API key updated")
	return c.NoContent(http.StatusNoContent)
}

// deleteAPIKey removes a key for good.
func (s *Server) deleteAPIKey(c echo.Context) error {
	id := c.Param("key_id")
	err := s.cat.WriteKeys(c.Request().Context(), func(t *tenant.Table) (*tenant.Table, []string, error) {
		next, err := t.Delete(id)
		if err != nil {
			return nil, nil, err
		}
		return next, []string{catalog.KeyRecord(id)}, nil
	})
	if err != nil {
		return err
	}
	s.log.Info().Str(logfield.Key, id).Msg("API key deleted")
	return c.NoContent(http.StatusNoContent)
}

// postRateLimit sets a tenant's limit (creates or replaces it).
func (s *Server) postRateLimit(c echo.Context) error {
	var req TenantRateLimit
	if err := s.decodeAI(c, &req); err != nil {
		return err
	}
	if req.TenantID == nil {
		return fmt.Errorf("%w: tenant_id is required", tenant.ErrInvalid)
	}
	l := tenant.Limit{TenantID: *req.TenantID, RPS: req.RPS, TokensPerMin: req.TokensPerMin}
	err := s.cat.WriteKeys(c.Request().Context(), func(t *tenant.Table) (*tenant.Table, []string, error) {
		next, _, err := t.SetLimit(l, s.cfg.Now())
		if err != nil {
			return nil, nil, err
		}
		return next, []string{catalog.LimitRecord(l.TenantID)}, nil
	})
	if err != nil {
		return err
	}
	s.log.Info().Str("tenant", l.TenantID).Int64("rps", l.RPS).Int64("tokens_per_min", l.TokensPerMin).Msg("tenant rate limit set")
	return c.NoContent(http.StatusNoContent)
}

func limitOf(l *tenant.Limit) TenantRateLimit {
	id, at := l.TenantID, l.UpdatedAt
	return TenantRateLimit{TenantID: &id, RPS: l.RPS, TokensPerMin: l.TokensPerMin, UpdatedAt: &at}
}

// getRateLimit answers one tenant's limit.
func (s *Server) getRateLimit(c echo.Context) error {
	l := s.cat.Keys().Limit(c.Param("tenant_id"))
	if l == nil {
		return fmt.Errorf("%w: tenant rate limit %s not found", tenant.ErrNotFound, c.Param("tenant_id"))
	}
	return c.JSON(http.StatusOK, limitOf(l))
}

// getRateLimits lists every tenant's limit (llb's).
func (s *Server) getRateLimits(c echo.Context) error {
	ls := s.cat.Keys().Limits()
	out := make([]TenantRateLimit, len(ls))
	for i, l := range ls {
		out[i] = limitOf(l)
	}
	return c.JSON(http.StatusOK, out)
}

// aiKeyErrorResponse classifies the key API's errors (errorResponse's
// part for them).
func aiKeyErrorResponse(err error) (int, ErrorBody, bool) {
	switch {
	case errors.Is(err, tenant.ErrInvalid):
		return http.StatusBadRequest, ErrorBody{Code: http.StatusBadRequest, Message: msgMalformed, Result: err.Error()}, true
	case errors.Is(err, tenant.ErrNotFound):
		return http.StatusNotFound, ErrorBody{Code: http.StatusNotFound, Message: msgNotFound, Result: err.Error()}, true
	case errors.Is(err, tenant.ErrFull):
		return http.StatusUnprocessableEntity, ErrorBody{Code: http.StatusUnprocessableEntity, Message: "Capacity insufficient", Result: err.Error()}, true
	}
	return 0, ErrorBody{}, false
}
