// Command shparse is the test oracle for vrouter-render's injection check: it
// parses bash text with mvdan.cc/sh/v3/syntax and says whether every given word
// appears only as a plain literal argument of a simple command (never its name,
// never inside a substitution, expansion, quotes, redirection, assignment,
// here-document, test or case pattern).
//
// Input: one JSON object per line, {"text": "...", "words": ["...", ...]}.
// Output: one JSON object per line, {"ok": true} or {"ok": false, "why": "..."}.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

type request struct {
	Text  string   `json:"text"`
	Words []string `json:"words"`
}

type verdict struct {
	OK  bool   `json:"ok"`
	Why string `json:"why,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "shparse: bad request:", err)
			os.Exit(2)
		}
		if err := out.Encode(check(req)); err != nil {
			os.Exit(2)
		}
	}
}

type span struct{ start, end uint }

func check(req request) verdict {
	file, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(req.Text), "")
	if err != nil {
		return verdict{Why: "parse error: " + err.Error()}
	}
	// Substitutions first: a call inside one is output of another command.
	var nested []span
	syntax.Walk(file, func(node syntax.Node) bool {
		switch node.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst, *syntax.FuncDecl:
			nested = append(nested, span{node.Pos().Offset(), node.End().Offset()})
		}
		return true
	})
	inside := func(node syntax.Node) bool {
		for _, s := range nested {
			if node.Pos().Offset() >= s.start && node.End().Offset() <= s.end {
				return true
			}
		}
		return false
	}
	wanted := map[string]bool{}
	for _, w := range req.Words {
		wanted[w] = true
	}
	plain := map[string]int{}
	syntax.Walk(file, func(node syntax.Node) bool {
		call, ok := node.(*syntax.CallExpr)
		if !ok || len(call.Args) < 2 || inside(call) {
			return true
		}
		for _, arg := range call.Args[1:] {
			if len(arg.Parts) != 1 {
				continue
			}
			if lit, ok := arg.Parts[0].(*syntax.Lit); ok && wanted[lit.Value] {
				plain[lit.Value]++
			}
		}
		return true
	})
	for _, w := range req.Words {
		if total := strings.Count(req.Text, w); total != plain[w] {
			return verdict{Why: fmt.Sprintf("%s occurs %d times, %d as a plain argument of a simple command", w, total, plain[w])}
		}
	}
	return verdict{OK: true}
}
