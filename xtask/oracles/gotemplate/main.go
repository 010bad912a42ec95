// Command gotemplate renders Go text/template + sprig templates the way the
// Go vrouter-operator does, for vrouter-render's differential tests of
// `vrouter-operator convert`. It is test tooling: `cargo xtask testenv` builds
// it into the test cache, and nothing ships it.
//
// It reads one JSON request per line on stdin and writes one JSON answer per
// line on stdout:
//
//	{"template": "...", "params": {...}}
//	{"json": {"output": "...", "error": "..."}, "typed": {...}}
//
// "json" decodes params as the Go operator does (encoding/json with UseNumber,
// so every number is a json.Number, which text/template sees as a string);
// "typed" makes every integer an int64 (or uint64), so integers behave as
// numbers (true unless 0, comparable with eq, formatted by %d) while other
// numbers stay json.Number and print as written. The function map is sprig's
// TxtFuncMap without the Go operator's denylist.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

// denied is the Go operator's function denylist (spec §5.1).
var denied = []string{"env", "expandenv", "getHostByName"}

func funcs() template.FuncMap {
	m := sprig.TxtFuncMap()
	for _, name := range denied {
		delete(m, name)
	}
	return m
}

type request struct {
	Template string          `json:"template"`
	Params   json.RawMessage `json:"params"`
}

type result struct {
	Output string `json:"output"`
	Error  string `json:"error,omitempty"`
}

type answer struct {
	JSON  result `json:"json"`
	Typed result `json:"typed"`
}

func decode(raw json.RawMessage) (map[string]any, error) {
	params := map[string]any{}
	if len(raw) == 0 {
		return params, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&params); err != nil {
		return nil, err
	}
	return params, nil
}

// typed turns every integer json.Number into an int64 or uint64.
func typed(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(x), 10, 64); err == nil {
			return u
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = typed(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = typed(e)
		}
		return out
	default:
		return v
	}
}

func render(tmpl *template.Template, data any) (r result) {
	defer func() {
		if p := recover(); p != nil {
			r = result{Error: fmt.Sprintf("panic: %v", p)}
		}
	}()
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return result{Output: buf.String(), Error: "execute: " + err.Error()}
	}
	return result{Output: buf.String()}
}

func answerFor(req request) answer {
	tmpl, err := template.New("").Funcs(funcs()).Parse(req.Template)
	if err != nil {
		failed := result{Error: "parse: " + err.Error()}
		return answer{JSON: failed, Typed: failed}
	}
	params, err := decode(req.Params)
	if err != nil {
		failed := result{Error: "params: " + err.Error()}
		return answer{JSON: failed, Typed: failed}
	}
	return answer{JSON: render(tmpl, params), Typed: render(tmpl, typed(params))}
}

func main() {
	in := bufio.NewReader(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	for {
		line, err := in.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var req request
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				fmt.Fprintf(os.Stderr, "gotemplate: bad request: %v\n", jerr)
				os.Exit(2)
			}
			if eerr := enc.Encode(answerFor(req)); eerr != nil {
				fmt.Fprintf(os.Stderr, "gotemplate: %v\n", eerr)
				os.Exit(2)
			}
			if ferr := out.Flush(); ferr != nil {
				os.Exit(2)
			}
		}
		if err != nil {
			return
		}
	}
}
