package rule

import "strings"

func checkOctaviaSchema(c *Checker, sa *ServiceArguments) {
	c.Between(SAField("connectionLimit"), sa.ConnectionLimit, 0, MaxUint32)
	c.Between(SAField("timeoutMemberConnect"), sa.TimeoutMemberConnect, 0, MaxUint32)
	c.Between(SAField("timeoutMemberData"), sa.TimeoutMemberData, 0, MaxUint32)
	c.Between(SAField("timeoutTcpInspect"), sa.TimeoutTCPInspect, 0, MaxUint32)
	c.Between(SAField("hsts_max_age"), sa.HSTSMaxAge, 0, MaxUint32)
	if sa.PathMatchMode != nil {
		c.OneOfString(SAField("path_match_mode"), *sa.PathMatchMode, "disabled", "prefix", "exact")
	}
	if sa.BackendProtocol != nil {
		c.OneOfString(SAField("backend_protocol"), *sa.BackendProtocol, "http1", "http2", "both")
	}
	if sa.MTLSFrontend != nil && sa.MTLSFrontend.ClientCertMode != nil {
		c.OneOfString(SAField("mtls_frontend.client_cert_mode"), *sa.MTLSFrontend.ClientCertMode, "disabled", "optional", "required")
	}
}

func checkOctavia(c *Checker, sa *ServiceArguments) {
	if sa.SessionHeaderName != "" {
		if sa.Sel != SelRR && sa.Sel != SelPersist {
			c.Semantic(SAField("session_header_name"), "session_header_name applies to sel 0 (rr) or 3 (persist), got sel %d", sa.Sel)
		}
		if !validSessionHeader(sa.SessionHeaderName) {
			c.Semantic(SAField("session_header_name"), "session_header_name %q must be a header name, \"cookie:<name>\", \"query:<param>\" or \"basic-auth\"", sa.SessionHeaderName)
		}
	}
	if sa.PathPrefix != "" && !strings.HasPrefix(sa.PathPrefix, "/") {
		c.Semantic(SAField("path_prefix"), "path_prefix must start with \"/\", got %q", sa.PathPrefix)
	}
	if sa.PathMatchMode != nil && *sa.PathMatchMode != "disabled" && *sa.PathMatchMode != "" && sa.PathPrefix == "" {
		c.Semantic(SAField("path_match_mode"), "path_match_mode %q needs a path_prefix", *sa.PathMatchMode)
	}
	if sa.HSTSMaxAge > 0 && sa.Security == 0 {
		c.Semantic(SAField("hsts_max_age"), "hsts_max_age needs security 1 (https) or 2 (e2e https); HSTS is only sent on TLS listeners")
	}
	if sa.MTLSFrontend != nil || sa.MTLSBackend != nil {
		if sa.Mode != ModeFullProxy {
			c.Semantic(SAField("mode"), "mTLS requires mode=fullproxy (4), got mode %d", sa.Mode)
		}
	}
	if f := sa.MTLSFrontend; f != nil && f.ClientCertMode != nil && *f.ClientCertMode != "disabled" && sa.Security != 1 && sa.Security != 2 {
		c.Semantic(SAField("mtls_frontend"), "frontend mTLS requires security=1 (https) or 2 (e2e https), got security %d", sa.Security)
	}
	if b := sa.MTLSBackend; b != nil && (b.VerifyServerCert != nil && *b.VerifyServerCert || b.ClientCertPath != "" || b.ClientCertData != "") && sa.Security != 2 {
		c.Semantic(SAField("mtls_backend"), "backend mTLS requires security=2 (e2e https), got security %d", sa.Security)
	}
}

func validSessionHeader(s string) bool {
	if s == "basic-auth" {
		return true
	}
	if name, ok := strings.CutPrefix(s, "cookie:"); ok {
		return name != "" && !strings.ContainsAny(name, " ;,=")
	}
	if name, ok := strings.CutPrefix(s, "query:"); ok {
		return name != "" && !strings.ContainsAny(name, " &=")
	}
	return isHeaderName(s)
}

// isHeaderName reports an RFC 9110 field-name token.
func isHeaderName(s string) bool {
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return s != ""
}
