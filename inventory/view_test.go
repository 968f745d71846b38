package inventory

import "testing"

func TestHashAlgoName_NamesBothModes(t *testing.T) {
	if got := HashAlgoName(mustExactHasher(t, "0")); got != "sha256_cbor" {
		t.Fatalf("got %s", got)
	}
	if got := HashAlgoName(mustTokenHasher(t, 16)); got != HashAlgoTokenKeyed {
		t.Fatalf("got %s", got)
	}
}
