package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/llbproject/llb/restapi"
)

// writeJSON writes a JSON document indented, followed by a newline.
func writeJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return &answerError{fmt.Errorf("the answer is not JSON: %w", err)}
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

// writeValue marshals v as indented JSON.
func writeValue(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the output: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// printResult prints a write's answer: the result line of LoxiLB's
// {"result":...}, or the JSON itself (-o json, or another shape).
func (a *app) printResult(body []byte) error {
	var r restapi.ResultBody
	if a.opts.output == outputJSON || json.Unmarshal(body, &r) != nil || r.Result == "" {
		if len(bytes.TrimSpace(body)) == 0 {
			_, err := fmt.Fprintln(a.stdout, "Success")
			return err
		}
		return writeJSON(a.stdout, body)
	}
	_, err := fmt.Fprintln(a.stdout, sanitize(r.Result))
	return err
}

// table renders rows in loxicmd's style: "| A | B |" with a rule under the
// header.
type table struct {
	header []string
	rows   [][]string
}

// newTable starts a table with the given column titles.
func newTable(header ...string) *table { return &table{header: header} }

// add appends a row; missing cells are empty.
func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

// render writes the table. Control characters in cells (which come from the
// server) are shown as '?' so they cannot drive the terminal.
func (t *table) render(w io.Writer) error {
	width := make([]int, len(t.header))
	clean := func(row []string) []string {
		out := make([]string, len(t.header))
		for i := range out {
			if i < len(row) {
				out[i] = sanitize(row[i])
			}
			if n := utf8.RuneCountInString(out[i]); n > width[i] {
				width[i] = n
			}
		}
		return out
	}
	head := clean(t.header)
	rows := make([][]string, len(t.rows))
	for i, r := range t.rows {
		rows[i] = clean(r)
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteByte('|')
		for i, c := range cells {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + " |")
		}
		b.WriteByte('\n')
	}
	line(head)
	b.WriteByte('|')
	for _, n := range width {
		b.WriteString(strings.Repeat("-", n+2) + "|")
	}
	b.WriteByte('\n')
	for _, r := range rows {
		line(r)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sanitize replaces control characters.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return '?'
		}
		return r
	}, s)
}

// orDash returns s, or "-" when it is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
