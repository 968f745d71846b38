package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// LongDocQA is long-document question answering (the many-questions-per-
// document RAG shape of Preble's workloads and llm-d's "37-capacity"
// benchmark): Documents documents, each DocMinTokens..DocMaxTokens long
// (drawn once per document, uniformly), each asked QuestionsPerDoc
// distinct questions. A request is one document followed by one of its
// questions; documents are drawn with Zipf popularity (ZipfAlpha; 0 is
// uniform), questions uniformly. A document's prefix is worth thousands of
// tokens of prefill, and one document fills a good part of a worker's
// cache. Zero fields take the defaults.
type LongDocQA struct {
	Options
	// Documents is the number of documents. Default 8.
	Documents int
	// QuestionsPerDoc is the number of distinct questions per document.
	// Default 32.
	QuestionsPerDoc int
	// DocMinTokens and DocMaxTokens bound a document's length. Defaults
	// 8192 and 32768.
	DocMinTokens, DocMaxTokens int
	// QuestionTokens is a question's length. Default 64.
	QuestionTokens int
	// OutputTokens is max_tokens. Default 128.
	OutputTokens int
	// ZipfAlpha (>= 0) skews document popularity.
	ZipfAlpha float64
}

func (l LongDocQA) withDefaults() LongDocQA {
	def(&l.Documents, 8)
	def(&l.QuestionsPerDoc, 32)
	def(&l.DocMinTokens, 8192)
	def(&l.DocMaxTokens, 32768)
	def(&l.QuestionTokens, 64)
	def(&l.OutputTokens, 128)
	return l
}

// Validate reports every problem at once.
func (l LongDocQA) Validate() error {
	l = l.withDefaults()
	var errs []error
	errs = appendPositive(errs, "documents", l.Documents)
	errs = appendPositive(errs, "questions per document", l.QuestionsPerDoc)
	errs = appendPositive(errs, "document min tokens", l.DocMinTokens)
	errs = appendPositive(errs, "question tokens", l.QuestionTokens)
	errs = appendPositive(errs, "output tokens", l.OutputTokens)
	if l.DocMaxTokens < l.DocMinTokens {
		errs = append(errs, fmt.Errorf("document max tokens %d below min %d", l.DocMaxTokens, l.DocMinTokens))
	}
	if !(l.ZipfAlpha >= 0) || math.IsInf(l.ZipfAlpha, 0) {
		errs = append(errs, fmt.Errorf("zipf alpha %v (want >= 0)", l.ZipfAlpha))
	}
	return joinConfig("long-document QA", errs)
}

// Source implements Spec.
func (l LongDocQA) Source(r *rand.Rand) (Source, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	l = l.withDefaults()
	return &longDocSource{spec: l, seed: r.Uint64(), zipf: newZipf(l.Documents, l.ZipfAlpha), docs: map[int]string{}}, nil
}

type longDocSource struct {
	spec LongDocQA
	seed uint64
	zipf zipf
	docs map[int]string // document text, built on first use
}

// Next implements Source.
func (src *longDocSource) Next(r *rand.Rand) (Item, error) {
	l := src.spec
	d := src.zipf.sample(r)
	q := r.IntN(l.QuestionsPerDoc)
	doc, ok := src.docs[d]
	if !ok {
		lr := contentRand(src.seed, 4, uint64(d))
		n := l.DocMinTokens + lr.IntN(l.DocMaxTokens-l.DocMinTokens+1)
		doc = text(lr, n)
		src.docs[d] = doc
	}
	question := text(contentRand(src.seed, 5, uint64(d), uint64(q)), l.QuestionTokens)
	it, err := l.completionItem(doc+"\n\nQuestion: "+question, l.OutputTokens, nil)
	if err != nil {
		return Item{}, err
	}
	it.Workload, it.Group = "long_doc_qa", d
	return it, nil
}
