//! The Go template engine as the Go operator runs it (`xtask/oracles/gotemplate`,
//! built by `cargo xtask testenv`): one long-running process, one JSON request
//! and answer per line.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde::Deserialize;
use serde_json::{Value, json};

/// What Go produced: the output, or the output so far and the error.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct GoRender {
    pub output: String,
    #[serde(default)]
    pub error: Option<String>,
}

impl GoRender {
    pub fn ok(&self) -> Option<&str> {
        self.error.is_none().then_some(self.output.as_str())
    }
}

/// Both ways the oracle renders (see its main.go).
#[derive(Debug, Clone, Deserialize)]
pub struct GoAnswer {
    /// As the Go operator does: every number a `json.Number`.
    pub json: GoRender,
    /// Integers as Go integers.
    pub typed: GoRender,
}

pub struct GoOracle {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl GoOracle {
    /// Starts the oracle; fails the test, saying how to build it, when missing.
    pub fn start() -> GoOracle {
        let path = vrouter_test_apiserver::go_template_oracle()
            .unwrap_or_else(|e| panic!("the differential tests need the Go template oracle: {e}"));
        let mut child = Command::new(&path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", path.display()));
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        GoOracle { child, stdin, stdout }
    }

    pub fn render(&mut self, template: &str, params: &Value) -> GoAnswer {
        let request = json!({"template": template, "params": params});
        writeln!(self.stdin, "{request}").expect("writing to the oracle");
        self.stdin.flush().expect("flushing to the oracle");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("reading from the oracle");
        assert!(!line.is_empty(), "the Go template oracle exited");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("oracle answer {line:?}: {e}"))
    }
}

impl Drop for GoOracle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
