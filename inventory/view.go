package inventory

// HashAlgoTokenKeyed is the hash_algo the inventory view reports for
// token-keyed mode (llb's own keys, not an engine algorithm).
const HashAlgoTokenKeyed = "token_keyed"

// HashAlgoName is the hash_algo of a rule's ChainHasher for the views.
func HashAlgoName(ch ChainHasher) string {
	if h, ok := ch.(engineKeys); ok {
		return string(h.Algo())
	}
	return HashAlgoTokenKeyed
}
