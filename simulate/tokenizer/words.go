package tokenizer

// Syllables the synthetic vocabulary is built from. Immutable.
var (
	onsets = [...]string{"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "ch", "st"}
	nuclei = [...]string{"a", "e", "i", "o", "u", "ai", "ou", "ea"}
	codas  = [...]string{"", "n", "r", "s", "t", "l", "m", "x"}
)

// NumWords is the size of the synthetic vocabulary Word draws from.
const NumWords = len(onsets) * len(nuclei) * len(codas)

// Word returns the synthetic word number k mod NumWords: 1 to 4 lowercase
// letters, so " "+Word(k) is always exactly one token. Generated text and
// workload prompts are built from these words, which makes their token
// counts exact and their length about four characters per token.
func Word(k uint64) string {
	k %= uint64(NumWords)
	c := codas[k%uint64(len(codas))]
	k /= uint64(len(codas))
	n := nuclei[k%uint64(len(nuclei))]
	k /= uint64(len(nuclei))
	o := onsets[k%uint64(len(onsets))]
	w := o + n + c
	if len(w) > MaxWordPiece {
		w = w[:MaxWordPiece]
	}
	return w
}
