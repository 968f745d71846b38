package rule

// OctaviaArguments are the inference gateway's general, Octavia and TLS
// serviceArguments keys (loxilb-compat.md §1.3 "IGW-only, general / Octavia /
// TLS"). llb stores and returns them; the data plane decides which it honours.
type OctaviaArguments struct {
	// ID is the rule's stable opaque id; minted (UUIDv4) when absent, kept
	// across replaces that omit it. Unique across rules.
	ID string `json:"id,omitempty"`
	// AdminStateUp pauses the rule when false; absent means true. Always
	// present on GET with its effective value.
	AdminStateUp *bool `json:"adminStateUp,omitempty"`
	// ProjectID is an opaque tenant id; GET /all?projectId= filters on it.
	ProjectID string `json:"projectId,omitempty"`
	// Annotations are opaque key/value pairs stored verbatim.
	Annotations map[string]string `json:"annotations,omitempty"`
	// ConnectionLimit caps concurrent client connections; 0 = unlimited.
	ConnectionLimit int64 `json:"connectionLimit,omitempty"`
	// TimeoutMemberConnect is the backend connect timeout in milliseconds (0 → 500 ms).
	TimeoutMemberConnect int64 `json:"timeoutMemberConnect,omitempty"`
	// TimeoutMemberData is the backend idle timeout in milliseconds (0 = default).
	TimeoutMemberData int64 `json:"timeoutMemberData,omitempty"`
	// TimeoutTCPInspect is the header-read deadline in milliseconds (0 = default).
	TimeoutTCPInspect int64 `json:"timeoutTcpInspect,omitempty"`
	// PathPrefix is a URL path prefix for L7 routing (part of the rule key).
	PathPrefix string `json:"path_prefix,omitempty"`
	// PathMatchMode is disabled, prefix or exact; "disabled" when absent.
	PathMatchMode *string `json:"path_match_mode,omitempty"`
	// ModelName is a model-name pool key (part of the rule key; "" is the
	// wildcard pool).
	ModelName string `json:"model_name,omitempty"`
	// TraceType names a tracing catalog (stored only).
	TraceType string `json:"trace_type,omitempty"`
	// BackendProtocol is http1, http2 or both; "http1" for fullproxy rules
	// when absent. P/D needs http1.
	BackendProtocol *string `json:"backend_protocol,omitempty"`
	// SessionHeaderName is the persistence key source for sel 0 and 3:
	// "<Header>", "cookie:<name>", "query:<param>" or "basic-auth".
	SessionHeaderName string `json:"session_header_name,omitempty"`
	// AlpnProtocols is the advertised ALPN list (no omitempty, as in LoxiLB).
	AlpnProtocols []string `json:"alpn_protocols"`
	// TLSVersions is the allowed TLS versions list (no omitempty, as in LoxiLB).
	TLSVersions []string `json:"tls_versions"`
	// TLSCiphers is an OpenSSL cipher string.
	TLSCiphers string `json:"tls_ciphers,omitempty"`
	// HSTSMaxAge is the Strict-Transport-Security max-age in seconds; needs security 1 or 2.
	HSTSMaxAge int64 `json:"hsts_max_age,omitempty"`
	// HSTSIncludeSubdomains appends includeSubDomains to HSTS.
	HSTSIncludeSubdomains bool `json:"hsts_include_subdomains,omitempty"`
	// HSTSPreload appends preload to HSTS.
	HSTSPreload bool `json:"hsts_preload,omitempty"`
	// VipQosPolicyID references an existing policy (stored only).
	VipQosPolicyID string `json:"vip_qos_policy_id,omitempty"`
	// BackendCACertID names the backend re-encryption CA bundle.
	BackendCACertID string `json:"backend_ca_cert_id,omitempty"`
	// BackendClientCertID names the client certificate presented to backends.
	BackendClientCertID string `json:"backend_client_cert_id,omitempty"`
	// MTLSFrontend configures client-certificate checks; needs mode 4 and security 1 or 2.
	MTLSFrontend *MTLSFrontend `json:"mtls_frontend,omitempty"`
	// MTLSBackend configures TLS toward backends; needs mode 4 and security 2.
	MTLSBackend *MTLSBackend `json:"mtls_backend,omitempty"`
	// OffloadState is GET-only (hardware offload state); llb never sets it.
	OffloadState string `json:"offload_state,omitempty"`
	// HWPkts is GET-only (hardware packet count); llb never sets it.
	HWPkts int64 `json:"hw_pkts,omitempty"`
	// HWBytes is GET-only (hardware byte count); llb never sets it.
	HWBytes int64 `json:"hw_bytes,omitempty"`
}

// MTLSFrontend is serviceArguments.mtls_frontend.
type MTLSFrontend struct {
	// ClientCertMode is disabled, optional or required.
	ClientCertMode *string `json:"client_cert_mode,omitempty"`
	// ClientCAPath is a PEM CA bundle path.
	ClientCAPath string `json:"client_ca_path,omitempty"`
	// ClientCACertData is an inline base64 PEM CA bundle.
	ClientCACertData string `json:"client_ca_cert_data,omitempty"`
	// RequireClientCN turns on the CN pattern check.
	RequireClientCN *bool `json:"require_client_cn,omitempty"`
	// ClientCNPattern is the accepted CN pattern (wildcards * and ?).
	ClientCNPattern string `json:"client_cn_pattern,omitempty"`
	// ClientCRLPath is a PEM CRL path.
	ClientCRLPath string `json:"client_crl_path,omitempty"`
}

// MTLSBackend is serviceArguments.mtls_backend.
type MTLSBackend struct {
	// VerifyServerCert verifies the backend certificate.
	VerifyServerCert *bool `json:"verify_server_cert,omitempty"`
	// BackendCAPath is the CA bundle used to verify backends.
	BackendCAPath string `json:"backend_ca_path,omitempty"`
	// ClientCertPath is the client certificate presented to backends.
	ClientCertPath string `json:"client_cert_path,omitempty"`
	// ClientKeyPath is the key of ClientCertPath.
	ClientKeyPath string `json:"client_key_path,omitempty"`
	// ClientCertData is an inline base64 PEM client certificate.
	ClientCertData string `json:"client_cert_data,omitempty"`
	// ClientKeyData is an inline base64 PEM client key.
	ClientKeyData string `json:"client_key_data,omitempty"`
}
