package gateway

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"
)

// Audio transcription and translation (POST /v1/audio/transcriptions and
// /v1/audio/translations): multipart/form-data bodies, forwarded as sent.
// Routing reads two small form fields — model (the endpoint set) and stream
// (a streamed answer, text/event-stream) — and skips the audio file part
// without copying it. There is no text prompt: Tier 1 and 1.5 do not
// apply, the request is placed by load.

// maxFormField bounds a form field routing reads (model, stream).
const maxFormField = 4 << 10

// parseMultipart parses an audio request's form for routing.
func (r *Request) parseMultipart(kind APIKind, body, contentType []byte) error {
	*r = Request{Kind: kind, Body: body, Texts: r.Texts[:0], Tokens: r.Tokens[:0], Messages: r.Messages[:0], Store: true}
	mt, params, err := mime.ParseMediaType(string(contentType))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return requestError(http.StatusBadRequest, CodeInvalidField, "", "an audio request must be multipart/form-data with a boundary (the file and the form fields), not "+strings.TrimSpace(string(contentType)))
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	file := false
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return requestError(http.StatusBadRequest, CodeInvalidField, "", "the multipart body cannot be read: "+err.Error())
		}
		switch p.FormName() {
		case "file":
			file = true
		case "model", "stream":
			v, err := io.ReadAll(io.LimitReader(p, maxFormField+1))
			if err != nil || len(v) > maxFormField {
				return fieldError(p.FormName(), p.FormName()+" must be a short form field")
			}
			if p.FormName() == "model" {
				r.Model = string(v)
				break
			}
			switch strings.ToLower(strings.TrimSpace(string(v))) {
			case "true", "1", "yes", "on", "t", "y":
				r.Stream = true
			case "false", "0", "no", "off", "f", "n", "":
			default:
				return fieldError("stream", "stream must be a boolean")
			}
		}
	}
	if !file {
		return requestError(http.StatusBadRequest, CodeMissingField, "file", "an audio request needs a file part")
	}
	return nil
}
