package rule

import "errors"

// ErrImmutable classifies a replace refused because it changes a field fixed
// at create time (a *ValidationError with a 409 problem matches it). Its text
// is LoxiLB's wire vocabulary, which clients match on.
var ErrImmutable = errors.New("lbrule-exist error: cant modify rule")
