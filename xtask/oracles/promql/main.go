// Command promql parses PromQL expressions with Prometheus's own parser
// (github.com/prometheus/prometheus/promql/parser) and names the metrics
// each one selects. The operator's tests feed it every query of the chart's
// Grafana dashboard and alerting rules, and check each name against what
// the operator exports: a query over a metric nobody exports shows nothing
// and alerts on nothing, silently. It is test tooling: `cargo xtask testenv`
// builds it into the test cache, and nothing ships it.
//
// It reads one JSON array of expressions from stdin and writes one JSON
// array, an entry per expression in the same order:
//
//	{"metrics": ["vrouter_configs"], "error": ""}
//
// An expression that does not parse has its parser error in "error".
// A selector without a metric name (`{job="x"}`) is named "" so the caller
// sees it.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

type answer struct {
	Metrics []string `json:"metrics"`
	Error   string   `json:"error"`
}

func names(expression string) answer {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(expression)
	if err != nil {
		return answer{Metrics: []string{}, Error: err.Error()}
	}
	seen := map[string]bool{}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		if selector, ok := node.(*parser.VectorSelector); ok {
			seen[metricName(selector)] = true
		}
		return nil
	})
	out := []string{}
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return answer{Metrics: out}
}

// metricName is the selector's name, or the value of an equality matcher
// on __name__; "" when neither fixes one name.
func metricName(selector *parser.VectorSelector) string {
	if selector.Name != "" {
		return selector.Name
	}
	for _, matcher := range selector.LabelMatchers {
		if matcher.Name == labels.MetricName && matcher.Type == labels.MatchEqual {
			return matcher.Value
		}
	}
	return ""
}

func main() {
	var expressions []string
	if err := json.NewDecoder(os.Stdin).Decode(&expressions); err != nil {
		fmt.Fprintf(os.Stderr, "promql: reading a JSON array of expressions from stdin: %v\n", err)
		os.Exit(2)
	}
	answers := make([]answer, 0, len(expressions))
	for _, expression := range expressions {
		answers = append(answers, names(expression))
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		fmt.Fprintf(os.Stderr, "promql: %v\n", err)
		os.Exit(2)
	}
}
