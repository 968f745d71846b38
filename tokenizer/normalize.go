package tokenizer

import (
	"strings"
	"unicode"

	"github.com/dlclark/regexp2"
)

// normalizer rewrites the text between added tokens before it is
// pre-tokenized.
type normalizer interface {
	normalize(s string) string
}

// sequenceNorm runs normalizers in order.
type sequenceNorm struct{ steps []normalizer }

func (n sequenceNorm) normalize(s string) string {
	for _, st := range n.steps {
		s = st.normalize(s)
	}
	return s
}

// prependNorm prepends a string to non-empty text.
type prependNorm struct{ prefix string }

func (n prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return n.prefix + s
}

// replaceNorm replaces a literal or a regex.
type replaceNorm struct {
	literal string
	re      *regexp2.Regexp // set for a Regex pattern
	content string
}

func (n replaceNorm) normalize(s string) string {
	if n.re != nil {
		out, err := n.re.Replace(s, n.content, -1, -1)
		if err != nil {
			return s
		}
		return out
	}
	if n.literal == "" {
		return s
	}
	return strings.ReplaceAll(s, n.literal, n.content)
}

// lowercaseNorm lowercases.
type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) string { return strings.ToLower(s) }

// stripNorm trims whitespace on either side.
type stripNorm struct{ left, right bool }

func (n stripNorm) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}
