package restapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"
)

// LoadToken reads a bearer token from path, trimming surrounding whitespace
// (a trailing newline from `echo secret > file` is not part of the token). An
// empty or whitespace-only file is an error: it would silently turn
// authentication off.
func LoadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("restapi: read token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("restapi: token file %s is empty", path)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("restapi: token file %s holds more than one word; a bearer token has no whitespace", path)
	}
	return tok, nil
}

// tokenChecker compares bearer tokens in constant time. It compares SHA-256
// digests so that neither the content nor the length of the configured token
// leaks through timing.
type tokenChecker struct {
	digest [sha256.Size]byte
}

func newTokenChecker(token string) *tokenChecker {
	return &tokenChecker{digest: sha256.Sum256([]byte(token))}
}

// check validates an Authorization header value.
func (t *tokenChecker) check(header string) error {
	scheme, cred, ok := strings.Cut(header, " ")
	switch {
	case header == "":
		return fmt.Errorf("%w: missing Authorization: Bearer <token> header", ErrUnauthorized)
	case !ok || !strings.EqualFold(scheme, "Bearer"):
		return fmt.Errorf("%w: Authorization header must use the Bearer scheme", ErrUnauthorized)
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(cred)))
	if subtle.ConstantTimeCompare(got[:], t.digest[:]) != 1 {
		return ErrUnauthorized
	}
	return nil
}
