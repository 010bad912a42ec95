//! Reads what a Dockerfile's final stage puts into the image: its base,
//! user, entrypoint, exposed ports, labels, environment and the paths its
//! COPY instructions write. Earlier stages are only build steps and are not
//! read. Any other instruction in the final stage is an error: its effect
//! on the image could not be compared with `cargo xtask image`'s.

use std::collections::{BTreeMap, BTreeSet};

/// Why a Dockerfile could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum DockerfileError {
    #[error("the Dockerfile has no FROM")]
    NoStage,
    #[error(
        "line {line}: {instruction} in the final stage is not compared with the image; only FROM, COPY, USER, EXPOSE, LABEL, ENV and ENTRYPOINT are"
    )]
    Unsupported { line: usize, instruction: String },
    #[error("line {line}: {instruction}: {reason}")]
    Malformed {
        line: usize,
        instruction: String,
        reason: String,
    },
}

/// The final stage, as the image it builds would show it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct FinalStage {
    /// The image named by its FROM.
    pub base: String,
    pub user: Option<String>,
    pub entrypoint: Option<Vec<String>>,
    /// `port/protocol`, as in an image config's `ExposedPorts`.
    pub ports: BTreeSet<String>,
    pub labels: BTreeMap<String, String>,
    /// `KEY=value`, in order.
    pub env: Vec<String>,
    pub copies: Vec<CopyInstruction>,
}

/// One COPY: the stage it reads from (`None`: the build context), its
/// sources and destination as written.
#[derive(Debug, PartialEq, Eq)]
pub struct CopyInstruction {
    pub from: Option<String>,
    pub sources: Vec<String>,
    pub dest: String,
}

impl CopyInstruction {
    /// The path each source lands at: into the destination directory when
    /// it ends with `/` or there are several sources, else the destination.
    pub fn targets(&self) -> Vec<(String, String)> {
        let into_dir = self.dest.ends_with('/') || self.sources.len() > 1;
        self.sources
            .iter()
            .map(|source| {
                let target = if into_dir {
                    let name = source.trim_end_matches('/').rsplit('/').next().unwrap_or(source);
                    format!("{}/{name}", self.dest.trim_end_matches('/'))
                } else {
                    self.dest.trim_end_matches('/').to_string()
                };
                (source.clone(), target)
            })
            .collect()
    }
}

/// One instruction: its line, its keyword in upper case and its arguments.
struct Instruction {
    line: usize,
    keyword: String,
    args: String,
}

/// Reads the final stage of the Dockerfile `text`.
pub fn final_stage(text: &str) -> Result<FinalStage, DockerfileError> {
    let instructions = instructions(text);
    let start = instructions
        .iter()
        .rposition(|i| i.keyword == "FROM")
        .ok_or(DockerfileError::NoStage)?;
    let mut stage = FinalStage::default();
    for instruction in &instructions[start..] {
        apply(&mut stage, instruction)?;
    }
    Ok(stage)
}

fn apply(stage: &mut FinalStage, i: &Instruction) -> Result<(), DockerfileError> {
    let malformed = |reason: &str| DockerfileError::Malformed {
        line: i.line,
        instruction: i.keyword.clone(),
        reason: reason.into(),
    };
    let words = words(&i.args).map_err(|reason| malformed(&reason))?;
    match i.keyword.as_str() {
        "FROM" => {
            let image = words.iter().find(|w| !w.starts_with("--"));
            stage.base = image.ok_or_else(|| malformed("no image"))?.clone();
        }
        "USER" => stage.user = Some(i.args.trim().to_string()),
        "ENTRYPOINT" => {
            let exec: Vec<String> = serde_json::from_str(i.args.trim())
                .map_err(|_| malformed("only the exec form (a JSON array) runs without a shell"))?;
            stage.entrypoint = Some(exec);
        }
        "EXPOSE" => {
            for port in words {
                let port = if port.contains('/') {
                    port
                } else {
                    format!("{port}/tcp")
                };
                stage.ports.insert(port);
            }
        }
        "LABEL" => {
            for (key, value) in pairs(&words).ok_or_else(|| malformed("expected key=value"))? {
                stage.labels.insert(key, value);
            }
        }
        "ENV" => {
            for (key, value) in pairs(&words).ok_or_else(|| malformed("expected KEY=value"))? {
                stage.env.push(format!("{key}={value}"));
            }
        }
        "COPY" => stage
            .copies
            .push(copy(&words).ok_or_else(|| malformed("expected sources and a destination"))?),
        other => {
            return Err(DockerfileError::Unsupported {
                line: i.line,
                instruction: other.to_string(),
            });
        }
    }
    Ok(())
}

/// COPY's words: `--from=<stage>` and other flags, then sources and the
/// destination.
fn copy(words: &[String]) -> Option<CopyInstruction> {
    if words.first().is_some_and(|w| w.starts_with('[')) {
        return None; // the JSON form is not read: write COPY's plain form
    }
    let (flags, paths): (Vec<&String>, Vec<&String>) = words.iter().partition(|w| w.starts_with("--"));
    let from = flags.iter().find_map(|f| f.strip_prefix("--from=")).map(str::to_string);
    let (dest, sources) = paths.split_last()?;
    if sources.is_empty() {
        return None;
    }
    Some(CopyInstruction {
        from,
        sources: sources.iter().map(|s| s.to_string()).collect(),
        dest: dest.to_string(),
    })
}

/// `key=value` words as pairs; `None` when one has no `=`.
fn pairs(words: &[String]) -> Option<Vec<(String, String)>> {
    words
        .iter()
        .map(|w| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// The instructions of `text`: comment and blank lines dropped, lines
/// ending in `\` joined with the next.
fn instructions(text: &str) -> Vec<Instruction> {
    let mut found = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let (start, mut joined) = pending.take().unwrap_or((n + 1, String::new()));
        if let Some(head) = trimmed.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            pending = Some((start, joined));
            continue;
        }
        joined.push_str(trimmed);
        let (keyword, args) = joined.split_once(char::is_whitespace).unwrap_or((joined.as_str(), ""));
        found.push(Instruction {
            line: start,
            keyword: keyword.to_ascii_uppercase(),
            args: args.trim().to_string(),
        });
    }
    found
}

/// Whitespace-separated words; double quotes group and are removed, `\`
/// escapes the next character inside them.
fn words(args: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = args.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next().ok_or("unclosed quote")? {
                        '"' => break,
                        '\\' => current.push(chars.next().ok_or("unclosed quote")?),
                        other => current.push(other),
                    }
                }
            }
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}
